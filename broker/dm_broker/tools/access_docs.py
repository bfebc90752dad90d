"""Renders the table of what each API needs (docs/security.md) from the API table's declarations.

    .venv/bin/python -m dm_broker.tools.access_docs   # prints the table to paste into docs/security.md
"""

from __future__ import annotations

from ..protocol.access import Access
from ..protocol.apis import SPECS


def _needs(access: Access) -> str:
    if access.public:
        return "nothing: answered before authentication"
    parts = []
    if access.requires is not None:
        parts.append(f"**{access.requires.operation.name} on the cluster** for the whole request "
                     "(refused before the handler runs)")
    parts += [str(c) for c in access.checks]
    text = "; ".join(parts)
    if access.filtered:
        text += "; what may not be described is left out, not refused"
    if access.note:
        text += f". {access.note[0].upper()}{access.note[1:]}"
    return text


def access_table() -> str:
    lines = ["| API (key) | needs |", "|---|---|"]
    for spec in sorted(SPECS, key=lambda s: s.key):
        lines.append(f"| {spec.name} ({spec.key}) | {_needs(spec.access)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(access_table(), end="")
