"""The test suite's own layout: test modules share helpers through `tests/support/`, never by
importing one another, so that each test module reads on its own and can be moved, renamed or
deleted without breaking another; and the shared definitions there agree with what they stand
for."""

from __future__ import annotations

import ast
from pathlib import Path

from hamimig.sim.nvml import WRITES
from hamimig.sim.ops import SIMULATED_NVML
from tests.support.nvml import MUTATING_NVML

TESTS = Path(__file__).resolve().parent
SUPPORT = TESTS / "support"


def _imported_modules(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, dotted name) of every module an `import` or `from ... import` names, anywhere in
    the module (a function-level import counts too); `from tests import x` also names
    `tests.x`, which may be a module."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _test_module(name: str) -> str | None:
    """The test module a dotted name lies in: `tests.test_x...`, `test_x...` (a sibling) or
    `.test_x...` (relative) all name `test_x`; anything else names none."""
    first = name.lstrip(".").removeprefix("tests.").split(".")[0]
    return first if first.startswith("test_") else None


def _imported_test_modules(tree: ast.Module) -> list[tuple[int, str]]:
    found = {
        (line, module) for line, name in _imported_modules(tree) if (module := _test_module(name))
    }
    return sorted(found)


def test_no_module_of_the_suite_imports_a_test_module() -> None:
    """Test modules, support modules and the suite's other helpers (conftest, golden, forked)."""
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, module in _imported_test_modules(tree):
            offenders.append(f"{path.relative_to(TESTS)}:{line} imports {module}")
    assert not offenders, "import shared helpers from tests.support instead:\n" + "\n".join(
        offenders
    )


def test_the_layout_check_sees_every_form_of_import() -> None:
    code = (
        "import tests.test_a\n"
        "from tests.test_b import x\n"
        "from tests import test_c\n"
        "from .test_d import y\n"
        "def f():\n"
        "    from tests.test_e import z\n"
        "from tests.support.cli import ok\n"
        "from tests.conftest import Cli\n"
        "from tests import golden, support\n"
        "import testing\n"
    )
    found = _imported_test_modules(ast.parse(code))
    assert found == [(1, "test_a"), (2, "test_b"), (3, "test_c"), (4, "test_d"), (6, "test_e")]


def test_every_support_module_says_why_it_exists() -> None:
    modules = sorted(SUPPORT.glob("*.py"))
    assert modules, "tests/support/ is missing"
    for path in modules:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert doc, f"{path.name} has no module docstring"


def test_the_mutating_nvml_functions_are_every_simulated_change() -> None:
    """One list says which NVML calls change the node; it must name every function the
    simulator implements that creates, destroys or sets something, and every call the simulator
    itself treats as a write (`nvmlShutdown` only publishes the call counts)."""
    by_name = {n for n in SIMULATED_NVML if any(w in n for w in ("Create", "Destroy", "Set"))}
    assert set(MUTATING_NVML) == by_name
    assert set(MUTATING_NVML) == WRITES - {"nvmlShutdown"}
    assert len(MUTATING_NVML) == len(set(MUTATING_NVML))
