"""The shape of an observation: its keys and value types, without the values.

Two backends agree on an action when its observations have the same shape: the same keys at every
level and the same JSON type at each (``str``, ``number``, ``bool``, a list, an object). Values are the
world's business (a job's CPU seconds, a run's AUC), shapes are the seam's. A ``null`` (an optional
field empty now, such as the exit code of a running job) and an empty list agree with any shape. Keys
that are ids made by a backend (tracking run ids, 32 hex digits) are masked, so a dict keyed by run ids
has the same shape on every backend.
"""

from __future__ import annotations

import re
from typing import Any, Union

Shape = Union[str, "ListShape", dict[str, "Shape"]]
"""A scalar's type name (``null``, ``bool``, ``number``, ``str``, or several joined by ``|``), a list's
shape, or a dict of shapes."""

_ID_KEYS = (re.compile(r"^[0-9a-f]{32}$"),)
ID_KEY = "<id>"
"""What a key made by a backend (a run id) becomes in a shape."""
MAP_KEY = "<key>"
"""What every key of a map (see :func:`shape_of`) becomes in a shape."""


class ListShape:
    """The shape of a list: its elements' shapes merged (``None`` for an empty list)."""

    __slots__ = ("element",)

    def __init__(self, element: Shape | None) -> None:
        self.element = element

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ListShape) and self.element == other.element

    def __hash__(self) -> int:
        return hash(("list", repr(self.element)))

    def __repr__(self) -> str:
        return f"[{self.element!r}]" if self.element is not None else "[]"


def _key(key: str) -> str:
    return ID_KEY if any(p.match(key) for p in _ID_KEYS) else key


def shape_of(value: Any, *, maps: frozenset[str] = frozenset(), path: str = "") -> Shape:
    """The shape of a JSON-able value (see the module docstring). ``maps``: dotted paths of dicts whose
    keys are data (named tallies where a missing name counts as 0): their keys become one ``<key>``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "str"
    if isinstance(value, dict):
        out: dict[str, Shape] = {}
        is_map = path in maps
        for k, v in value.items():
            key = MAP_KEY if is_map else _key(str(k))
            s = shape_of(v, maps=maps, path=_join(path, str(k)))
            out[key] = merge(out[key], s) if key in out else s
        return out
    if isinstance(value, list | tuple):
        element: Shape | None = None
        for item in value:
            s = shape_of(item, maps=maps, path=f"{path}[]")
            element = s if element is None else merge(element, s)
        return ListShape(element)
    return type(value).__name__


def merge(a: Shape, b: Shape) -> Shape:
    """One shape covering ``a`` and ``b`` (list elements, values under a masked key)."""
    if a == b or b == "null":
        return a
    if a == "null":
        return b
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = merge(out[k], v) if k in out else v
        return out
    if isinstance(a, ListShape) and isinstance(b, ListShape):
        if a.element is None:
            return b
        if b.element is None:
            return a
        return ListShape(merge(a.element, b.element))
    names = sorted(set(_names(a)) | set(_names(b)))
    return "|".join(names)


def _names(s: Shape) -> list[str]:
    if isinstance(s, str):
        return s.split("|")
    return ["list" if isinstance(s, ListShape) else "object"]


def describe(s: Shape | None) -> str:
    """A short name of a shape for messages (``str``, ``number``, ``object``, ``list``)."""
    if s is None:
        return "missing"
    if isinstance(s, str):
        return s
    return "list" if isinstance(s, ListShape) else "object"


def differences(a: Shape, b: Shape, *, path: str = "", names: tuple[str, str] = ("a", "b")) -> list[str]:
    """Where two shapes disagree, one line per place (``result.runs[].metrics: object on a, list on
    b``); empty when they agree."""
    left, right = names
    if a == b or a == "null" or b == "null":
        return []
    if (
        isinstance(a, dict)
        and isinstance(b, dict)
        and (a == {} or b == {})
        and (MAP_KEY in a or MAP_KEY in b)
    ):
        return []  # an empty map agrees with any
    where = path or "<root>"
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) - set(b)):
            out.append(f"{_join(path, k)}: present on {left}, missing on {right}")
        for k in sorted(set(b) - set(a)):
            out.append(f"{_join(path, k)}: missing on {left}, present on {right}")
        for k in sorted(set(a) & set(b)):
            out.extend(differences(a[k], b[k], path=_join(path, k), names=names))
        return out
    if isinstance(a, ListShape) and isinstance(b, ListShape):
        if a.element is None or b.element is None:
            return []
        return differences(a.element, b.element, path=f"{path}[]", names=names)
    if isinstance(a, str) and isinstance(b, str):
        sa, sb = set(a.split("|")) - {"null"}, set(b.split("|")) - {"null"}
        if sa <= sb or sb <= sa:  # one is a union covering the other (a value once int, once absent)
            return []
    return [f"{where}: {describe(a)} on {left}, {describe(b)} on {right}"]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


__all__ = ["ID_KEY", "MAP_KEY", "ListShape", "Shape", "describe", "differences", "merge", "shape_of"]
