"""The node a command works on is decided once, by the CLI, and does not change; the stores
write through the fault hook injected into them, never back up through the engine."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from hamimig.engine.node import Node
from hamimig.sim import backend
from tests.support.cli import Cli

ALLOCATE = ("allocate", "--pod", "ns/a", "--gpu", "0", "--profile", "1g.10gb")


def _built_nodes(monkeypatch: pytest.MonkeyPatch) -> list[Node]:
    """The nodes the CLI hands to mutating commands (each checks its directories first)."""
    seen: list[Node] = []
    check_dirs = Node.check_dirs

    def spy(node: Node) -> None:
        seen.append(node)
        check_dirs(node)

    monkeypatch.setattr(Node, "check_dirs", spy)
    return seen


@pytest.mark.parametrize("dry_run", [False, True])
def test_the_cli_builds_the_node_complete_and_nothing_changes_it(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, dry_run: bool
) -> None:
    seen = _built_nodes(monkeypatch)
    ran = cli(*ALLOCATE, "--lock-timeout", "5", *(["--dry-run"] if dry_run else []))
    assert ran.exit_code == 0, ran.stderr
    [node] = seen
    assert (node.command, node.read_only, node.lock_timeout) == ("allocate", dry_run, 5.0)
    assert node.pasteable("list") == " ".join(["hamimig", *cli.globals(), "list"])
    for name in ("command", "read_only", "lock_timeout", "state_dir", "records"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(node, name, getattr(node, name))


def test_a_durable_write_calls_nothing_above_the_store(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between a store's write and the simulator's fault hook lie only the store and the
    simulator: the hook is injected where writes happen, not reached through the engine."""
    between: list[list[str]] = []
    hook = backend.run_file_op

    def spy(store: Any, op: Any, perform: Callable[[], None]) -> None:
        modules = []
        for frame in inspect.stack()[1:]:
            module = frame.frame.f_globals.get("__name__", "")
            modules.append(module)
            if module.startswith("hamimig.store.") and frame.function != "__call__":
                break
        between.append(modules)
        hook(store, op, perform)

    monkeypatch.setattr(backend, "run_file_op", spy)
    assert cli(*ALLOCATE).exit_code == 0
    assert between  # the records, the intent and the CDI spec were written
    below = ("hamimig.sim.", "hamimig.store.")
    above = {m for modules in between for m in modules if not m.startswith(below)}
    assert above == set(), between
