"""Every error's exit code comes from its category, declared once."""

from __future__ import annotations

import importlib
import pkgutil

import hamimig
from hamimig import errors
from hamimig.errors import HamimigError

# The categories the exit codes are defined by; a subclass names its category by inheriting it.
CATEGORIES = (
    errors.UsageError,
    errors.ConflictError,
    errors.HardwareError,
    errors.UnverifiableError,
    errors.NotFoundError,
    errors.BusyError,
)

_TOLERATED: set[str] = set()


def _all_error_classes() -> list[type[HamimigError]]:
    for module in pkgutil.walk_packages(hamimig.__path__, "hamimig."):
        importlib.import_module(module.name)
    found: list[type[HamimigError]] = []
    pending: list[type[HamimigError]] = [HamimigError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return [c for c in found if c.__module__.startswith("hamimig.")]


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def test_the_walk_sees_errors_outside_errors_py() -> None:
    names = {_name(c) for c in _all_error_classes()}
    assert "hamimig.pods.model.PodSourceError" in names
    assert "hamimig.rehearsal.demo.DemoFailed" in names


def test_no_error_redeclares_the_exit_code_or_code_it_inherits() -> None:
    redundant = []
    for cls in _all_error_classes():
        for attr in ("exit_code", "code"):
            if attr not in vars(cls) or cls is HamimigError:
                continue
            parent = cls.__mro__[1]
            if getattr(parent, attr) == vars(cls)[attr] and _name(cls) not in _TOLERATED:
                redundant.append(f"{_name(cls)}.{attr}")
    assert redundant == []


def test_an_error_with_a_categorys_exit_code_inherits_that_category() -> None:
    """Repeating a category's pair instead of inheriting it hides the error from `except`."""
    strays = []
    for cls in _all_error_classes():
        if cls in CATEGORIES or _name(cls) in _TOLERATED:
            continue
        for category in CATEGORIES:
            same = (cls.exit_code, cls.code) == (category.exit_code, category.code)
            if same and not issubclass(cls, category):
                strays.append(f"{_name(cls)} should inherit {category.__name__}")
    assert strays == []
