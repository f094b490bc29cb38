"""Reading a table without rules (kubectl's look, as `-o wide` and narrow tables draw it) back
into rows, so that tests compare what a table shows with the command's JSON."""

from __future__ import annotations

import re


def plain_rows(lines: list[str], key: str) -> list[dict[str, str]]:
    """The rows of a table without rules (kubectl's look): each column starts under its name,
    and a row starts on the line where column `key` has text."""
    names = re.split(r" {2,}", lines[0].strip())
    starts = [lines[0].index(name) for name in names]
    rows: list[dict[str, list[str]]] = []
    for line in lines[1:]:
        cells = {
            name: line[start:end].strip()
            for name, start, end in zip(names, starts, [*starts[1:], None], strict=True)
        }
        if cells[key] or not rows:
            rows.append({name: [] for name in names})
        for name, cell in cells.items():
            rows[-1][name].extend([cell] if cell else [])
    return [{name: "".join(fragments) for name, fragments in row.items()} for row in rows]
