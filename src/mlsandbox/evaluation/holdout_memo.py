"""Holdout scores remembered by the identity of the model and of the holdout.

Scoring a model on the hidden holdout is a pure function of the fitted model and the rows. Where a backend
hands back the same fitted object again (``sim``'s tracker returns the model its fit produced, and fits are
kept and shared), grading it again on the same holdout object gives the same number, so the number is
remembered: a training run that registers the same fit on the same instance many times grades it once.

Entries are keyed by the two objects' ids and hold weak references to both, so an entry is used only while
the very objects it was computed on are alive (an id reused by a new object never matches); models are
shared read-only. Objects that cannot be weakly referenced are scored every time.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

KEPT = 256

_MEMO: OrderedDict[tuple[int, int, Hashable], tuple[weakref.ref[Any], weakref.ref[Any], float]] = (
    OrderedDict()
)
_LOCK = threading.Lock()


def score(model: Any, holdout: Any, what: Hashable, compute: Callable[[], float]) -> float:
    """``compute()`` (the score named ``what`` of ``model`` on ``holdout``), remembered while both live."""
    key = (id(model), id(holdout), what)
    with _LOCK:
        hit = _MEMO.get(key)
        if hit is not None and hit[0]() is model and hit[1]() is holdout:
            _MEMO.move_to_end(key)
            return hit[2]
    value = compute()
    try:
        entry = (weakref.ref(model), weakref.ref(holdout), value)
    except TypeError:  # not weakly referenceable: never remembered
        return value
    with _LOCK:
        _MEMO[key] = entry
        while len(_MEMO) > KEPT:
            _MEMO.popitem(last=False)
    return value


def clear() -> None:
    with _LOCK:
        _MEMO.clear()


__all__ = ["KEPT", "clear", "score"]
