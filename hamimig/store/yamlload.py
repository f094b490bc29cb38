"""YAML that means one thing: a key given twice in one mapping is refused (docs/formats.md
"Config"), the same way for every YAML document hamimig reads, since PyYAML would silently keep
the last. The check is one length comparison per mapping; the path to a duplicate is found only
once one is certain, by composing again, so a 70 MB pod list pays only when refused.
"""

from __future__ import annotations

import functools
import re
from typing import Any

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


class DuplicateKey(ValueError):
    """A mapping that gives one key twice; `str()` is the one-line reason, without the file."""

    def __init__(self, key: Any, first_line: int, line: int, column: int) -> None:
        super().__init__(key, first_line, line)
        self.key = key
        self.first_line = first_line
        self.line = line
        """1-based line of the second occurrence."""
        self.column = column
        """0-based column of the second occurrence, as the parser's marks count it."""
        self.path: str | None = None
        """Where the mapping is ("" for the top level), once `load` has found it."""

    def __str__(self) -> str:
        where = {None: "", "": " at the top level"}.get(self.path, f" in {self.path}")
        return f"duplicate key {self.key!r}{where} (lines {self.first_line} and {self.line})"


def _check_pairs(loader: Any, pairs: list[Any]) -> None:
    """Raise `DuplicateKey` for the first key of `pairs` (key and value nodes) given twice."""
    seen: dict[Any, Any] = {}
    for key_node, _ in pairs:
        key = loader.construct_object(key_node, deep=True)  # built already: cached by node
        first = seen.get(key)
        if first is not None:
            mark = key_node.start_mark
            raise DuplicateKey(key, first.start_mark.line + 1, mark.line + 1, mark.column)
        seen[key] = key_node


@functools.cache
def refusing_duplicates(base: type[Any]) -> type[Any]:
    """A subclass of the PyYAML loader `base` whose mappings refuse a key given twice. Keys are
    the same when they load equal (`1` and `1.0`, `yes` and `true`), since the second would
    replace the first; keys merged with `<<` are not duplicates."""

    construct = base.construct_mapping  # not `super()`: this runs for every mapping

    class Loader(base):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            pairs = node.value  # merge keys are deleted from this list, merged pairs go before
            mapping = construct(self, node, deep)
            if len(mapping) != len(pairs) or node.value is not pairs:
                _check_pairs(self, pairs)
            return mapping

    Loader.__name__ = Loader.__qualname__ = f"Unique{base.__name__}"
    return Loader


def load(text: str, loader: type[Any]) -> Any:
    """`yaml.load` with a loader made by `refusing_duplicates` (or a subclass of one); a
    `DuplicateKey` it raises carries the path to the mapping."""
    import yaml

    try:
        return yaml.load(text, Loader=loader)
    except DuplicateKey as exc:
        exc.path = _path_to_key(text, loader, exc.line - 1, exc.column)
        raise


def _path_to_key(text: str, loader: type[Any], line: int, column: int) -> str | None:
    """The path (`items[3].metadata.annotations`) to the mapping holding the key node that
    starts at `line` and `column` (both 0-based), or None if it cannot be found again."""
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    reader = loader(text)
    try:
        root = reader.get_single_node()
    except Exception:  # the document parsed once already; this is only for the message
        return None
    finally:
        reader.dispose()
    stack: list[tuple[Any, str]] = [(root, "")]
    visited: set[int] = set()  # an alias makes one node appear in two places (or in itself)
    while stack:
        node, path = stack.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        children: list[tuple[Any, str]] = []
        if isinstance(node, MappingNode):
            for key_node, value_node in node.value:
                mark = key_node.start_mark
                if (mark.line, mark.column) == (line, column):
                    return path
                name = key_node.value if isinstance(key_node, ScalarNode) else "?"
                children.append((value_node, _step(path, name)))
        elif isinstance(node, SequenceNode):
            children = [(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
        stack.extend(reversed(children))
    return None


def _step(path: str, key: str) -> str:
    if _PLAIN_KEY.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{key!r}]"
