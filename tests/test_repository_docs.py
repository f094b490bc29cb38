"""The repository explains itself: nothing in it points at documents outside it, and the
runbook's examples are the ones `scripts/runbook.py` regenerates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# The founders' documents outside the repository, spelt so that this file does not name them.
_OUTSIDE = [name + ".md" for name in ("CONTRACT", "FACTS", "DESIGN")] + [
    "../" + "shared",
    "shared" + "/tools",
    "shared" + "/seed",
    "the " + "seed",
]


def _tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):  # not a checkout: every file below the root
        skip = {".git", ".venv", ".tools", ".hypothesis", ".wheels"}
        return [
            p for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.relative_to(ROOT).parts)
        ]
    return [ROOT / name for name in listed.decode().split("\0") if name]


def test_no_file_refers_to_documents_outside_the_repository() -> None:
    """The repository explains itself: only `.ci/run` may name the outside build script of the
    reference CDI library's checker."""
    found = []
    for path in _tracked_files():
        if path.relative_to(ROOT).as_posix() == ".ci/run" or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            # The file names as written (docs/design.md is ours); the rest in any case.
            words = [w for w in _OUTSIDE if (w in line if w.endswith(".md") else w in line.lower())]
            found += [f"{path.relative_to(ROOT)}:{number}: {word}" for word in words]
    assert found == []


def test_the_runbook_blocks_are_the_ones_scripts_runbook_regenerates() -> None:
    """`python scripts/runbook.py` rewrites docs/runbook.md's examples from real runs; its check
    fails when an edit moved, added or dropped one of them."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "runbook.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
