"""The action catalog is assembled from packs; clashes and broken packs fail with precise messages."""

from __future__ import annotations

from typing import Literal

import pytest

from mlsandbox.gateway.actions import ActionModel
from mlsandbox.gateway.packs.core.actions import PACK as CORE_PACK
from mlsandbox.gateway.packs.core.actions import ListDatasets
from mlsandbox.gateway.registry import (
    ActionPack,
    PackAction,
    PackError,
    PackRuntime,
    build_catalog,
    get_catalog,
)


class Ping(ActionModel):
    """Answer pong."""

    type: Literal["ping"] = "ping"


def _pack(name: str = "extra", models: tuple = (Ping,), impl: str = __name__) -> ActionPack:
    return ActionPack(name=name, actions=tuple(PackAction(m) for m in models), implementation=impl)


def handle_ping(ctx: object, a: Ping) -> dict[str, bool]:
    return {"pong": True}


def pong_again(ctx: object, a: Ping) -> dict[str, bool]:
    return {"pong": False}


def test_builtin_catalog_starts_with_the_core_pack() -> None:
    cat = get_catalog()
    assert cat.packs[0].name == "core"
    assert cat.types[: len(CORE_PACK.types)] == CORE_PACK.types
    assert len(set(cat.types)) == len(cat.types)
    assert cat.pack_of("list_datasets").name == "core"


def test_a_new_pack_extends_the_union() -> None:
    cat = build_catalog((CORE_PACK, _pack()))
    assert cat.types[-1] == "ping"
    assert isinstance(cat.adapter.validate_python({"type": "ping"}), Ping)
    rt = PackRuntime.load(cat)
    assert rt.handlers["ping"](None, Ping()) == {"pong": True}  # type: ignore[arg-type]


def test_duplicate_action_type_is_refused_with_both_pack_names() -> None:
    class Dup(ListDatasets):
        pass

    with pytest.raises(PackError, match="'list_datasets' of pack 'extra' is already defined by pack 'core'"):
        build_catalog((CORE_PACK, _pack(models=(Dup,))))


def test_duplicate_pack_name_is_refused() -> None:
    with pytest.raises(PackError, match="two action packs are named 'core'"):
        build_catalog((CORE_PACK, _pack(name="core")))


def test_missing_handler_and_missing_module_are_named() -> None:
    with pytest.raises(PackError, match=r"mlsandbox\.gateway\.safety has no handler handle_ping"):
        PackRuntime.load(build_catalog((_pack(impl="mlsandbox.gateway.safety"),)))
    with pytest.raises(PackError, match=r"cannot import 'mlsandbox\.nope'"):
        PackRuntime.load(build_catalog((_pack(impl="mlsandbox.nope"),)))


def test_a_broken_or_clashing_plugin_pack_is_left_out_and_the_rest_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib.metadata import EntryPoint

    from mlsandbox.gateway import registry

    eps = [
        EntryPoint("a-broken", "mlsandbox_no_such_module:PACK", registry.ENTRY_POINT_GROUP),
        EntryPoint("b-clash", f"{__name__}:CLASHING", registry.ENTRY_POINT_GROUP),
        EntryPoint("c-good", f"{__name__}:GOOD", registry.ENTRY_POINT_GROUP),
    ]
    monkeypatch.setattr(
        registry, "entry_points_of", lambda group: eps if group == registry.ENTRY_POINT_GROUP else []
    )
    monkeypatch.setattr(registry, "PLUGIN_ERRORS", [])
    packs = registry.discover_packs()
    names = [p.name for p in packs]
    assert "good" in names and "core" in names and "clash" not in names
    assert len(registry.PLUGIN_ERRORS) == 2
    assert "'a-broken' left out" in registry.PLUGIN_ERRORS[0]
    assert "already defined by pack 'core'" in registry.PLUGIN_ERRORS[1]
    assert build_catalog(packs).types[-1] == "ping"


class _Dup(ListDatasets):
    pass


CLASHING = ActionPack(name="clash", actions=(PackAction(_Dup),), implementation=__name__)
GOOD = ActionPack(name="good", actions=(PackAction(Ping),), implementation=__name__)


def test_one_declaration_carries_the_model_its_hints_capability_and_handler() -> None:
    pack = ActionPack(
        name="extra",
        actions=(PackAction(Ping, capability="serving", read_only=True, handler="pong_again"),),
        implementation=__name__,
    )
    cat = build_catalog((pack,))
    assert cat.capability("ping") == "serving" and cat.read_only == {"ping"} and not cat.destructive
    assert PackRuntime.load(cat).handlers["ping"](None, Ping()) == {"pong": False}  # type: ignore[arg-type]


def test_every_builtin_handler_names_the_episode_context() -> None:
    """Handlers, hooks and suppliers take the episode's context (never the gateway)."""
    import inspect

    rt = PackRuntime.load(get_catalog())
    fns = [*rt.handlers.values(), *(f for hs in rt.hooks.values() for _, f in hs)]
    fns += [f for ss in rt.suppliers.values() for _, f in ss]
    for fn in fns:
        first = next(iter(inspect.signature(fn).parameters.values()))
        assert first.annotation == "EpisodeContext", (fn.__module__, fn.__name__, first)
