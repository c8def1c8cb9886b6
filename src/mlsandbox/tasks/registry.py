"""The registry of task kinds: the built-in ones by name, plug-in ones through the ``mlsandbox.kinds``
entry-point group (an entry point names a :class:`~mlsandbox.tasks.kind.TaskKind` instance or class).

:data:`DatasetSpec` is the discriminated union of every kind's spec model by ``kind``; a dataset without
``kind`` is ``tabular`` (binary classification, what every scenario asked for before kinds existed). An
unknown kind is a validation error naming the field and the known kinds.
"""

from __future__ import annotations

import functools
import importlib
import re
from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import Discriminator, Tag

from mlsandbox import plugins
from mlsandbox.tasks.kind import RL_PREPARATION_POSITIONS, RL_TRAIN_POSITIONS, TaskKind

if TYPE_CHECKING:
    from mlsandbox.data.spec import TabularDataset

GROUP = "mlsandbox.kinds"
DEFAULT_KIND = "tabular"
"""The kind of a dataset spec without a ``kind`` field."""
BUILTIN: dict[str, str] = {
    "tabular": "mlsandbox.tasks.tabular_binary:KIND",
    "tabular_multiclass": "mlsandbox.tasks.tabular_multiclass:KIND",
    "tabular_regression": "mlsandbox.tasks.tabular_regression:KIND",
    "timeseries_forecasting": "mlsandbox.tasks.timeseries:KIND",
    "text_classification": "mlsandbox.tasks.text:KIND",
    "image_classification": "mlsandbox.tasks.images:KIND",
}
"""The built-in kinds (``module:attribute``), loaded by name (a broken one is an error, not a warning)."""
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


class UnknownKind(KeyError):
    """A kind no installed declaration names."""


def check_kind(obj: Any) -> TaskKind:
    """``obj`` as a :class:`TaskKind` instance (a class is instantiated), or a :class:`PluginError`."""
    if isinstance(obj, type) and issubclass(obj, TaskKind):
        obj = obj()
    if not isinstance(obj, TaskKind):
        raise plugins.PluginError(f"expected a TaskKind, got {type(obj).__name__}")
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not _NAME.match(name):
        raise plugins.PluginError(f"a TaskKind's name must match {_NAME.pattern}, got {name!r}")
    spec = getattr(obj, "spec", None)
    fields = getattr(spec, "model_fields", {})
    for needed in ("kind", "name", "target", "formats"):
        if needed not in fields:
            raise plugins.PluginError(f"kind {name!r}: its spec model has no {needed!r} field")
    if fields["kind"].default != name:
        raise plugins.PluginError(
            f"kind {name!r}: its spec's kind field defaults to {fields['kind'].default!r}"
        )
    if not obj.metrics or not obj.algorithms:
        raise plugins.PluginError(f"kind {name!r} declares no metric or no algorithm")
    _check_rl_slots(obj)
    return obj


def _check_rl_slots(kind: TaskKind) -> None:
    """A :class:`PluginError` naming what is wrong with a kind's RL slot templates: too many positions,
    an algorithm or a hyperparameter the kind has not, a strategy that is not one of its preparations."""
    train = kind.train_slots()
    if len(train) > RL_TRAIN_POSITIONS:
        raise plugins.PluginError(
            f"kind {kind.name!r} declares {len(train)} train slots; the RL action space has {RL_TRAIN_POSITIONS}"
        )
    for slot in train:
        try:
            TaskKind.check_algorithm(kind, slot.algorithm, dict(slot.hyperparams))
        except ValueError as e:
            raise plugins.PluginError(f"kind {kind.name!r}: train slot {slot}: {e}") from None
    preparations = kind.preparation_slots()
    if len(preparations) > RL_PREPARATION_POSITIONS:
        raise plugins.PluginError(
            f"kind {kind.name!r} declares {len(preparations)} preparation slots; the RL action space has "
            f"{RL_PREPARATION_POSITIONS}"
        )
    unknown = sorted(set(preparations) - set(kind.preparations))
    if unknown:
        raise plugins.PluginError(
            f"kind {kind.name!r}: preparation slot(s) {unknown} are not among its preparations "
            f"{list(kind.preparations)}"
        )


def _builtin(ref: str) -> TaskKind:
    module, _, attr = ref.partition(":")
    return check_kind(getattr(importlib.import_module(module), attr))


@functools.cache
def kinds() -> dict[str, TaskKind]:
    """Every kind by name: the built-ins, then the plug-ins that loaded (a plug-in that clashes with a
    known name is left out and listed by ``mlsandbox plugins``)."""
    out = {name: _builtin(ref) for name, ref in BUILTIN.items()}
    for ep in plugins.entry_points_of(GROUP, own=False):
        record = plugins.load_plugin(ep, check_kind, kind="task kind")
        if record.obj is None:
            continue
        kind = record.obj
        if kind.name in out:
            plugins.left_out(ep, f"kind {kind.name!r} is already declared", kind="task kind")
            continue
        out[kind.name] = kind
    return out


def names() -> list[str]:
    return list(kinds())


def get(name: str) -> TaskKind:
    """The kind ``name``; :class:`UnknownKind` naming the known kinds."""
    found = kinds().get(name)
    if found is None:
        raise UnknownKind(f"unknown kind {name!r}; known kinds: {', '.join(kinds())}")
    return found


def kind_of(spec: Any) -> TaskKind:
    """The kind of a dataset spec (by its ``kind`` field)."""
    return get(str(getattr(spec, "kind", DEFAULT_KIND)))


def _tag(v: Any) -> str:
    kind = v.get("kind") if isinstance(v, dict) else getattr(v, "kind", None)
    return str(kind or DEFAULT_KIND)


def dataset_spec_type() -> Any:
    """The discriminated union of the kinds' spec models by ``kind`` (``tabular`` when absent)."""
    members = [Annotated[k.spec, Tag(k.name)] for k in kinds().values()]
    known = ", ".join(kinds())
    return Annotated[
        Union[tuple(members)],  # noqa: UP007 (built from the registry at run time)
        Discriminator(
            _tag,
            custom_error_type="unknown_kind",
            custom_error_message=f"kind: unknown kind; known kinds: {known}",
            custom_error_context={"known": known},
        ),
    ]


if TYPE_CHECKING:  # every built-in spec is a table's; a plug-in's is checked when it loads
    DatasetSpec = TabularDataset
else:
    DatasetSpec = dataset_spec_type()
"""A dataset spec of any installed kind (see the module docstring)."""

__all__ = [
    "BUILTIN",
    "DEFAULT_KIND",
    "GROUP",
    "DatasetSpec",
    "UnknownKind",
    "check_kind",
    "dataset_spec_type",
    "get",
    "kind_of",
    "kinds",
    "names",
]
