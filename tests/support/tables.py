"""Reading a table back into rows, boxed or without rules (kubectl's look, as `-o wide` and
narrow tables draw it), so that tests compare what a table shows with the command's JSON."""

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


def boxed_rows(lines: list[str], first: str, key: str | None = None) -> list[dict[str, str]]:
    """The rows of the boxed table whose header starts with column `first`; a row starts on the
    line where column `key` (the first column when None; one that never wraps) has text, and
    each cell is its fragments joined as they were folded (a space rich wrapped at is lost)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(f"┃ {first} "))
    while lines[start - 1].startswith("┃"):  # a header wrapped over lines
        start -= 1
    parts: list[list[str]] = []
    while lines[start].startswith("┃"):
        cells = [c.strip() for c in lines[start].split("┃")[1:-1]]
        parts = parts or [[] for _ in cells]
        for part, cell in zip(parts, cells, strict=True):
            part.extend([cell] if cell else [])
        start += 1
    header = [" ".join(part) for part in parts]
    at = 0 if key is None else header.index(key)
    rows: list[dict[str, list[str]]] = []
    for line in lines[start:]:
        if line.startswith("└"):
            break
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells[at] or not rows:
            rows.append({name: [] for name in header})
        for name, cell in zip(header, cells, strict=True):
            rows[-1][name].extend([cell] if cell else [])
    return [{name: "".join(fragments) for name, fragments in row.items()} for row in rows]
