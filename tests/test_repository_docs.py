"""The repository explains itself: the README's Design section names every module, in the
bullet of its package, and `docs/` holds the design and the formats it points to."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _design_bullets() -> dict[str, str]:
    """The README's Design section as package -> its bullet text (`hamimig/` for top level)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Design\n", 1)[1].split("\n## ", 1)[0]
    bullets: dict[str, str] = {}
    for bullet in re.split(r"\n- ", section)[1:]:
        head = re.match(r"`([a-z_]+/)`", bullet)
        if head:
            bullets[head.group(1)] = bullet.split("\n\n", 1)[0]
    return bullets


def test_the_readme_design_section_names_every_module() -> None:
    bullets = _design_bullets()
    missing = []
    for path in sorted((ROOT / "hamimig").rglob("*.py")):
        parts = path.relative_to(ROOT / "hamimig").parts
        package = "hamimig/" if len(parts) == 1 else parts[0] + "/"
        bullet = bullets.get(package, "")
        named = f"`{parts[-1]}`" in bullet
        for inner in parts[1:-1]:  # a subpackage is named in its package's bullet too
            named = named and f"`{inner}/`" in bullet
        if not named and not (parts[-1] == "__init__.py" and len(parts) == 2):
            missing.append("/".join(parts))
    assert missing == [], f"README Design does not name: {missing}"


def test_a_package_bullet_names_no_module_that_does_not_exist() -> None:
    for package, bullet in _design_bullets().items():
        directory = ROOT / "hamimig" if package == "hamimig/" else ROOT / "hamimig" / package
        for name in re.findall(r"`([a-z_]+\.py)`", bullet):
            assert list(directory.rglob(name)), f"README Design names {package}{name}"


def test_docs_hold_the_design_and_the_formats() -> None:
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    formats = (ROOT / "docs" / "formats.md").read_text(encoding="utf-8")
    for heading in (
        "Layers",
        "The pipeline",
        "States and transitions",
        "Crash safety",
        "Trust model",
    ):
        assert f"\n## {heading}\n" in design, heading
    for heading in (
        "Exit codes",
        "JSON results",
        "Ownership records",
        "Intents",
        "The CDI removal queue",
        "Counters",
        "CDI specs",
        "Pod annotation",
    ):
        assert f"\n## {heading}\n" in formats, heading


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
    """`python scripts/runbook.py` rewrites the Runbook's examples from real runs; its check
    fails when a README edit moved, added or dropped one of them."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "runbook.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
