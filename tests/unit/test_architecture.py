"""The broker's shape may only get better (issue 64, ADR 0062): the figures tests/architecture.py measures from
the source are held to where they stand, so a change that widens the import circle, grows a hub class or types a
collaborator `Any` fails here and says which figure moved. Lower a bound when a change lowers its figure."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest
from architecture import circles, measure
from dm_broker import ports
from dm_broker.broker import Broker

PACKAGE = Path(__file__).resolve().parents[2] / "broker" / "dm_broker"

# Where each figure stood on 2026-12-07 (fa3c165 and the ports of ADR 0062): issue 64's goal is far below.
LARGEST_IMPORT_CIRCLE = 27  # modules, counting imports inside functions and under TYPE_CHECKING
CLASS_LINES = {  # the hubs issue 64 names
    "dm_broker.controller.controller.Controller": 1159,
    "dm_broker.broker.Broker": 1016,
    "dm_broker.groups.coordinator.GroupCoordinator": 894,
}
ANY_LINES_OTHER_CLASSES = 600  # every other class
HUB_MEMBERS_READ = 87  # members of Broker read by other modules (`broker.x`, `ctx.broker.x`)


@pytest.fixture(scope="module")
def shape():
    return measure(PACKAGE)


def test_the_import_circle_does_not_grow(shape) -> None:
    largest = max(circles(shape.imports), key=len, default=set())
    assert len(largest) <= LARGEST_IMPORT_CIRCLE, f"the import circle grew to {len(largest)}: {sorted(largest)}"


def test_the_checker_sees_a_circle(tmp_path: Path) -> None:
    """Not vacuous: a package whose modules import each other (one only under TYPE_CHECKING, one inside a
    function) is one circle; a module beside it that only imports is not in it."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text(textwrap.dedent("""
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from .c import Thing
    """))
    (package / "c.py").write_text("def f():\n    from .a import x\n")
    (package / "d.py").write_text("from .a import x\n")
    found = circles(measure(package).imports)
    assert found == [{"pkg.a", "pkg.b", "pkg.c"}]


def test_no_hub_class_grows_and_no_other_class_becomes_one(shape) -> None:
    for name, bound in CLASS_LINES.items():
        assert shape.class_lines[name] <= bound, f"{name} grew to {shape.class_lines[name]} lines"
    others = {n: lines for n, lines in shape.class_lines.items()
              if n not in CLASS_LINES and lines > ANY_LINES_OTHER_CLASSES}
    assert others == {}, f"classes over {ANY_LINES_OTHER_CLASSES} lines: {others}"


def test_no_collaborator_is_typed_any(shape) -> None:
    assert shape.any_collaborators == [], "type these against a port (dm_broker/ports.py)"


def test_the_hub_is_not_read_more(shape) -> None:
    assert len(shape.hub_members) <= HUB_MEMBERS_READ, (
        f"{len(shape.hub_members)} members of Broker are read from outside it; new parts take ports instead")


def test_the_group_protocols_use_the_coordinators_public_port() -> None:
    """consumer_protocol and share_protocol call the coordinator's write/notify/prepare_rebalance, not its
    private members."""
    for module in ("consumer_protocol.py", "share_protocol.py"):
        tree = ast.parse((PACKAGE / "groups" / module).read_text())
        private = sorted({ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                          and n.attr.startswith("_") and not n.attr.startswith("__")
                          and ast.unparse(n.value) not in ("self", "cls")})
        assert private == [], f"{module} reaches into private members: {private}"


@pytest.mark.parametrize("port", [ports.TopicLookup, ports.LeaderVerdicts, ports.TopicConfigs, ports.ConfigLevels,
                                  ports.BrokerIdentity])
def test_the_broker_satisfies_each_port(port: type) -> None:
    """Every method of the port is the broker's with the same parameters; every attribute is set in its
    constructor (what a type checker would say, without one in the suite)."""
    init = inspect.getsource(Broker.__init__)
    for klass in port.__mro__:
        if klass in (object,) or klass.__name__ in ("Protocol", "Generic"):
            continue
        for name, member in vars(klass).items():
            if name.startswith("_"):
                continue
            ours = getattr(Broker, name, None)
            assert ours is not None and callable(ours), f"Broker has no {name}() for {port.__name__}"
            assert list(inspect.signature(ours).parameters) == list(inspect.signature(member).parameters), name
        for name in getattr(klass, "__annotations__", {}):
            assert f"self.{name} " in init or f"self.{name}:" in init, f"Broker sets no {name} for {port.__name__}"
