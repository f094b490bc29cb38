#!/usr/bin/env python3
"""Regenerate completions/ (bash, zsh, fish), man/hamimig.1 and docs/reference.md from the CLI.

python scripts/gen-docs.py          # write them
python scripts/gen-docs.py --check  # exit 1 if any is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # docgen/ sits beside the package, not in it

from docgen import generate  # noqa: E402
from hamimig.cli.app import app  # noqa: E402


def main() -> int:
    check = "--check" in sys.argv[1:]
    stale = []
    for relative, content in generate(app).items():
        path = ROOT / relative
        if check:
            if not path.is_file() or path.read_text(encoding="utf-8") != content:
                stale.append(relative)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        sys.stdout.write(f"wrote {relative}\n")
    if stale:
        sys.stderr.write("stale: " + ", ".join(stale) + " (run python scripts/gen-docs.py)\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
