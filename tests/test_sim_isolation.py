"""A simulated node never writes to the real node's directories: a rehearsal with `--sim` on a
GPU node (root in a debugging shell) must leave no record for the device plugin's recovery and
no CDI spec for the runtime. Everything of a simulated node lives in `<file>.d/` beside it; the
real node's paths are used only when named (option or environment variable).

The production paths are module constants, read when the CLI is imported: each run here is a
fresh interpreter that points them (and HOME) at temporary directories before the import, so a
write to a default would land there and be seen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hamimig.rehearsal.simulator import sim_init
from tests.support.cli import Cli, allocated, ok, refused
from tests.support.node import node_dir, node_document
from tests.support.processes import REPO_ROOT

# argv: the root of the stand-ins, the commands (JSON), the file the exit statuses go to.
PRELUDE = """
import json, sys
from pathlib import Path

root = Path(sys.argv[1])
import hamimig.defaults as defaults
import hamimig.hw.devnodes as devnodes
import hamimig.hw.minors as minors

defaults.DEFAULT_STATE_DIR = root / "var/run/hami/dynamic-mig-state"
defaults.DEFAULT_CDI_DIR = root / "var/run/cdi"
defaults.DEFAULT_CONFIG = root / "etc/hamimig/config.yaml"
minors.DEFAULT_MIG_MINORS = root / "proc/driver/nvidia-caps/mig-minors"
devnodes.DEFAULT_PROC_DEVICES = root / "proc/devices"
devnodes.DEFAULT_CAPABILITIES = root / "proc/driver/nvidia/capabilities"
import hamimig.engine.node as node
import hamimig.engine.safety as safety

node.SYSTEM_CDI_DIRS = (root / "etc/cdi", root / "var/run/cdi")
safety.SYSTEM_CDI_DIR = root / "etc/cdi"
from hamimig.cli.app import run

codes = [run(argv) for argv in json.loads(sys.argv[2])]
Path(sys.argv[3]).write_text(json.dumps(codes))
"""

PRODUCTION = (
    "var/run/hami/dynamic-mig-state",
    "var/run/cdi",
    "etc/hamimig",
    "etc/cdi",
    "proc",
    "home",
)
"""What stands for the real node's directories and the user's home, under the test's root."""


def _run(root: Path, commands: list[list[str]], env: dict[str, str] | None = None) -> list[int]:
    """Run `commands` in one fresh interpreter whose production paths and HOME lie under
    `root`; their exit statuses."""
    codes = root / "codes.json"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HAMIMIG_", "KUBE"))}
    ran = subprocess.run(
        [sys.executable, "-c", PRELUDE, str(root), json.dumps(commands), str(codes)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**clean, "HOME": str(root / "home"), **(env or {})},
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    found: list[int] = json.loads(codes.read_text())
    return found


def _root(tmp_path: Path) -> Path:
    """The stand-ins of the production directories, existing and empty, and HOME."""
    for path in PRODUCTION:
        (tmp_path / path).mkdir(parents=True)
    return tmp_path


def _written(root: Path) -> list[str]:
    """Every file and directory made under the production stand-ins and HOME."""
    return sorted(str(p.relative_to(root)) for path in PRODUCTION for p in (root / path).rglob("*"))


_ALLOC = ["allocate", "--gpu", "0", "--profile", "1g.10gb", "--assume-no-pods"]


def _lifecycle(sim: Path, *given: str) -> list[list[str]]:
    """Every command that writes or reads the state, on the simulated node at `sim`."""
    at, alloc = ["--sim", str(sim), *given, "-o", "json"], _ALLOC
    return [
        [*at, "sim", "init", "--model", "H100-SXM5-80GB", "--count", "2"],
        [*at, "sim", "create", "--gpu", "1", "--profile", "1g.10gb", "--placement", "0"],
        [*at, "sim", "show"],
        [*at, *alloc, "--pod", "ns/a"],
        [*at, "release", "--pod", "ns/a"],
        [*at, *alloc, "--pod", "ns/b", "--placement", "6"],
        [*at, "release", "--pod", "ns/b"],
        [*at, "reclaim", "--gpu", "0", "--placement", "6", "--assume-no-pods"],
        [*at, *alloc, "--pod", "ns/c"],
        [*at, "recover", "--assume-no-pods"],
        [*at, "reconcile"],
        [*at, "list"],
        [*at, "doctor"],
        [*at, "metrics"],
        [*at, "events"],
        [*at, "config", "show"],
    ]


def test_a_simulated_node_writes_nothing_to_the_real_nodes_directories(tmp_path: Path) -> None:
    root = _root(tmp_path)
    sim = tmp_path / "rehearsal" / "node.json"
    codes = _run(root, _lifecycle(sim))
    assert codes == [0] * len(codes), codes
    assert _written(root) == []
    home = node_dir(sim)
    assert [p for p in (home / "state").iterdir() if p.name.startswith("hami-owned-mig-")]
    assert list((home / "cdi").iterdir())
    assert (home / "mig-minors").is_file() and (home / "nvidia-cdi" / "nvidia.yaml").is_file()
    assert sorted(p.name for p in sim.parent.iterdir()) == [
        "node.json",
        "node.json.d",
    ]
    assert (home / "node.lock").is_file()  # the lock too is in the node's home


def test_the_real_nodes_directories_are_used_when_named(tmp_path: Path) -> None:
    root = _root(tmp_path)
    state, cdi = root / "var/run/hami/dynamic-mig-state", root / "var/run/cdi"
    config = root / "etc/hamimig/config.yaml"
    config.write_text("cdi:\n  annotations: true\n")
    named = ["--state-dir", str(state), "--cdi-dir", str(cdi), "--config", str(config)]
    sim = tmp_path / "rehearsal" / "node.json"
    codes = _run(root, _lifecycle(sim, *named))
    assert codes == [0] * len(codes), codes
    assert any(p.name.startswith("hami-owned-mig-") for p in state.iterdir())
    assert all("hami.io/mig-uuid" in spec.read_text() for spec in cdi.iterdir())
    assert list(cdi.iterdir())
    assert not (node_dir(sim) / "state").exists() and not (node_dir(sim) / "cdi").exists()


def test_the_environment_names_them_too(tmp_path: Path) -> None:
    root = _root(tmp_path)
    state, cdi = root / "var/run/hami/dynamic-mig-state", root / "var/run/cdi"
    config = root / "etc/hamimig/config.yaml"
    config.write_text("cdi:\n  annotations: true\n")
    sim = tmp_path / "rehearsal" / "node.json"
    env = {
        "HAMIMIG_STATE_DIR": str(state),
        "HAMIMIG_CDI_DIR": str(cdi),
        "HAMIMIG_CONFIG": str(config),
    }
    init, alloc = ["--sim", str(sim), "sim", "init", "--model", "H100-SXM5-80GB"], _ALLOC
    assert _run(root, [init, ["--sim", str(sim), *alloc, "--pod", "ns/a"]], env) == [0, 0]
    assert any(p.name.startswith("hami-owned-mig-") for p in state.iterdir())
    [spec] = cdi.iterdir()
    assert "hami.io/mig-uuid" in spec.read_text()  # the annotations the named config asks for


def test_the_real_nodes_config_is_not_a_simulated_nodes_default(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / "etc/hamimig/config.yaml").write_text("unknownKey: 1\n")  # refused wherever read
    sim = tmp_path / "rehearsal" / "node.json"
    at = ["--sim", str(sim), "-o", "json"]
    init = [*at, "sim", "init", "--model", "H100-SXM5-80GB", "--count", "1"]
    assert _run(root, [init, [*at, "list"], [*at, "doctor"]]) == [0, 0, 0]
    (node_dir(sim) / "config.yaml").write_text("unknownKey: 1\n")
    named = ["--config", str(root / "etc/hamimig/config.yaml")]
    assert _run(root, [[*at, "list"], [*at, *named, "list"]]) == [2, 2]


def test_a_simulated_node_never_reads_the_hosts_cdi_specs(tmp_path: Path) -> None:
    """A spec in the host's /etc/cdi that defines the device of a simulated instance is the
    host's business: it neither fails doctor nor blocks a reuse. The node's own stand-in for
    /etc/cdi (its NVIDIA spec directory) is searched instead."""
    root = _root(tmp_path)
    sim = tmp_path / "rehearsal" / "node.json"
    at = ["--sim", str(sim), "-o", "json"]
    init = [*at, "sim", "init", "--model", "H100-SXM5-80GB", "--count", "1"]
    idle = [init, [*at, *_ALLOC, "--pod", "ns/a"], [*at, "release", "--pod", "ns/a"]]
    assert _run(root, idle) == [0, 0, 0]
    [spec] = (node_dir(sim) / "cdi").iterdir()
    forged = json.loads(spec.read_text())
    forged["devices"][0]["containerEdits"] = {"deviceNodes": [{"path": "/dev/nvidia1"}]}
    (root / "etc/cdi/forged.json").write_text(json.dumps(forged))
    assert _run(root, [[*at, "doctor"], [*at, *_ALLOC, "--pod", "ns/b"]]) == [0, 0]
    (node_dir(sim) / "nvidia-cdi" / "forged.json").write_text(json.dumps(forged))
    assert _run(root, [[*at, "doctor"], [*at, "release", "--pod", "ns/b"]]) == [5, 5]


def test_two_nodes_in_one_directory_share_no_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    sim_init(a, "H100-SXM5-80GB", 1)
    sim_init(b, "A100-SXM4-40GB", 2)
    shown = {
        node: ok(Cli(node, tmp_path / "state", tmp_path / "cdi").json("sim", "show"))
        for node in (a, b)
    }
    for key in ("migMinors", "procDevices", "capabilitiesDir", "cdiBaseDir"):
        assert Path(shown[a][key]).parent == node_dir(a), key
        assert Path(shown[b][key]).parent == node_dir(b), key
    base_a = (Path(shown[a]["cdiBaseDir"]) / "nvidia.yaml").read_text()
    assert shown[a]["gpus"][0]["uuid"] in base_a
    assert all(gpu["uuid"] not in base_a for gpu in shown[b]["gpus"])
    for node in (a, b):  # the default directories too, not only the driver's files
        home = node_dir(node)
        ran = _run(tmp_path, [["--sim", str(node), *_ALLOC, "--pod", "ns/a"]])
        assert ran == [0]
        assert any(p.name.startswith("hami-owned-mig-") for p in (home / "state").iterdir())


def test_a_node_made_before_homes_keeps_its_files_beside_it(cli: Cli) -> None:
    """A node file without `home` (hamimig before this layout): its driver files are the ones
    beside it, and its state goes to `<file>.d/` all the same."""
    home = node_dir(cli.sim)
    for name in ("mig-minors", "proc-devices", "nvidia-capabilities", "nvidia-cdi"):
        (home / name).rename(cli.sim.with_name(name))
    with node_document(cli.sim) as doc:
        del doc["home"]
    shown = ok(cli.json("sim", "show"))
    assert Path(shown["migMinors"]) == cli.sim.with_name("mig-minors")
    assert Path(shown["cdiBaseDir"]) == cli.sim.with_name("nvidia-cdi")
    mig = allocated(cli, "ns/a", "1g.10gb")
    assert Path(ok(cli.json("show", mig))["cdiSpec"]).is_file()
    checks = {c["name"]: c["status"] for c in ok(cli.json("doctor"))["checks"]}
    assert checks["mig-minors"] == "ok"
    assert not (home / "mig-minors").exists()


def test_a_home_elsewhere_is_refused(cli: Cli) -> None:
    """The node file names a directory beside it, never a path: the simulator writes the
    driver's files there."""
    with node_document(cli.sim) as doc:
        doc["home"] = "../elsewhere"
    message = refused(cli.json("list"), 2, "usage")
    assert "home must be the name of a directory beside the node file" in message


def test_a_rehearsal_under_a_group_writable_umask_runs(tmp_path: Path) -> None:
    """`umask 002` (common for users in a debugging shell) once made the simulated NVIDIA base
    spec group-writable, so every allocate and recover refused the node (exit 5) as if it could
    be forged. The simulator writes the driver's files with the driver's modes."""
    root = _root(tmp_path)
    sim = tmp_path / "rehearsal" / "node.json"
    previous = os.umask(0o002)
    try:
        codes = _run(root, _lifecycle(sim))
    finally:
        os.umask(previous)
    assert codes == [0] * len(codes), codes
    loose = [
        f"{p} {p.stat().st_mode & 0o777:o}"
        for p in (sim, *node_dir(sim).rglob("*"))
        if p.stat().st_mode & 0o022
    ]
    assert loose == []


def test_a_mistyped_node_is_refused_and_nothing_is_made(tmp_path: Path) -> None:
    """A `--sim` path with no node behind it (a typo) is exit 2 with the way to make one, from
    every command, before any directory, lock or state of it is made: allocate once made the
    node's home and state directory, then blamed a missing NVIDIA base spec."""
    root = _root(tmp_path)
    typo = tmp_path / "rehearsal" / "nod.json"
    typo.parent.mkdir()
    at = ["--sim", str(typo)]
    commands = [
        [*at, *_ALLOC, "--pod", "ns/a"],
        [*at, *_ALLOC, "--pod", "ns/a", "--dry-run"],
        [*at, "release", "--pod", "ns/a"],
        [*at, "reclaim", "--gpu", "0", "--all-idle", "--assume-no-pods"],
        [*at, "recover", "--assume-no-pods"],
        [*at, "reconcile"],
        [*at, "forget", "MIG-12345678"],
        [*at, "list"],
        [*at, "sim", "show"],
    ]
    assert _run(root, commands) == [2] * len(commands)
    assert list(typo.parent.iterdir()) == [] and _written(root) == []
    named = Cli(typo, tmp_path / "state", tmp_path / "cdi")
    message = refused(named.json(*_ALLOC, "--pod", "ns/a"), 2, "usage")
    assert message == f"no simulated node at {typo}: run 'hamimig --sim {typo} sim init'"
    assert not named.state_dir.exists() and not named.cdi_dir.exists()


def test_a_directory_or_fifo_named_as_the_node_makes_nothing(tmp_path: Path) -> None:
    """A `--sim` that is a directory or a FIFO is no node: every command that takes the node
    lock refuses it (exit 2) before it makes the home, the state directory or a lock; they
    once left `<sim>.d/state/hamimig.lock` behind and refused for another reason."""
    root = _root(tmp_path)
    where = tmp_path / "rehearsal"
    where.mkdir()
    (where / "dir.json").mkdir()
    os.mkfifo(where / "fifo.json")
    for name in ("dir.json", "fifo.json"):
        at = ["--sim", str(where / name)]
        commands = [
            [*at, *_ALLOC, "--pod", "ns/a"],
            [*at, "release", "--pod", "ns/a"],
            [*at, "reclaim", "--gpu", "0", "--all-idle", "--assume-no-pods"],
            [*at, "recover", "--assume-no-pods"],
            [*at, "reconcile"],
            [*at, "forget", "MIG-12345678"],
        ]
        assert _run(root, commands) == [2] * len(commands), name
    assert sorted(p.name for p in where.iterdir()) == ["dir.json", "fifo.json"]
    assert list((where / "dir.json").iterdir()) == []
