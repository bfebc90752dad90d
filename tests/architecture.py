"""The broker's shape, measured from its source (issue 64, ADR 0062): which modules import which (at module
level, inside functions and under TYPE_CHECKING alike), the import circles that makes, the classes' sizes, the
collaborators typed `Any`, and which members of the `Broker` hub other modules read. `python -m architecture
broker/dm_broker` (from tests/) prints the figures; tests/unit/test_architecture.py holds them to their bounds."""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Shape:
    imports: dict[str, set[str]] = field(default_factory=dict)  # module -> modules of the package it imports
    class_lines: dict[str, int] = field(default_factory=dict)  # "module.Class" -> lines
    any_collaborators: list[str] = field(default_factory=list)  # "module:line name" typed Any
    hub_members: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # member -> modules


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """The absolute names an ImportFrom brings in (the module and each `from x import name`, which may be a
    submodule)."""
    if node.level:
        base = module.split(".")
        base = base[:len(base) - node.level + (1 if is_package else 0)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    return [target] + [f"{target}.{alias.name}" for alias in node.names]


def measure(root: Path, hub_class: str = "Broker", hub_names: tuple[str, ...] = ("broker",)) -> Shape:
    """The shape of the package at `root` (a directory with __init__.py)."""
    shape = Shape()
    files = {_module_name(root, p): p for p in root.rglob("*.py")}
    known = set(files)
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        imported: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                imported.update(_resolve(module, path.name == "__init__.py", node))
            elif isinstance(node, ast.ClassDef):
                shape.class_lines[f"{module}.{node.name}"] = (node.end_lineno or node.lineno) - node.lineno + 1
            elif isinstance(node, ast.arg | ast.AnnAssign):
                name = node.arg if isinstance(node, ast.arg) else ast.unparse(node.target)
                annotation = node.annotation
                if annotation is not None and ast.unparse(annotation) == "Any" and name.split(".")[-1] in hub_names:
                    shape.any_collaborators.append(f"{module}:{node.lineno} {name}")
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute | ast.Name):
                owner = node.value.attr if isinstance(node.value, ast.Attribute) else node.value.id
                if owner in hub_names and module.rsplit(".", 1)[-1] != hub_class.lower():
                    shape.hub_members[node.attr].add(module)
        shape.imports[module] = {m for m in imported if m in known and m != module}
    return shape


def circles(imports: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[set[str]] = []
    counter = 0
    for start in imports:
        if start in index:
            continue
        work = [(start, iter(sorted(imports.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(imports.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def report(root: Path) -> str:
    shape = measure(root)
    largest = max(circles(shape.imports), key=len, default=set())
    big = sorted(shape.class_lines.items(), key=lambda kv: -kv[1])[:6]
    readers = {m for modules in shape.hub_members.values() for m in modules}
    return "\n".join([
        f"modules {len(shape.imports)}, the largest import circle {len(largest)} modules",
        f"the largest classes {big}",
        f"collaborators typed Any: {len(shape.any_collaborators)}",
        f"the hub's members read from outside: {len(shape.hub_members)} by {len(readers)} modules",
    ])


if __name__ == "__main__":
    print(report(Path(sys.argv[1] if len(sys.argv) > 1 else "broker/dm_broker")))
