"""The fault kinds' declarations (:mod:`mlsandbox.faultkinds`): every declared kind is in every table
derived from them (the scenario's union of fault models, the engine's behaviours, the catalog, the
backends' tables), every parameters model has exactly one declaration (a kind half declared fails
here), and the action packs' declarations of the fault kinds their actions address."""

from __future__ import annotations

import inspect
from typing import Any, Union, get_args, get_origin

import pytest

from mlsandbox import faultkinds
from mlsandbox.backends.kube.faults import control as kube_faults
from mlsandbox.backends.local.faults import toxiproxy
from mlsandbox.backends.protocols import NETWORK_FAULTS, Support
from mlsandbox.backends.sim import faults as sim_faults
from mlsandbox.cli.faults import catalog_rows
from mlsandbox.faultkinds import (
    BACKENDS,
    BY_NAME,
    KINDS,
    FaultKind,
    FaultParams,
    Mechanism,
    Refused,
    capabilities_of,
)
from mlsandbox.faults.behaviours import BEHAVIOURS, Behaviour, addressed_by
from mlsandbox.gateway.registry import PackError, _check_pack, get_catalog
from mlsandbox.scenario import perturbations as P

GROUPS = [
    faultkinds.services,
    faultkinds.resources,
    faultkinds.network,
    faultkinds.task,
    faultkinds.config,
    faultkinds.data,
]


def _union_members(annotated: Any) -> tuple[type, ...]:
    (union, *_) = get_args(annotated)
    assert get_origin(union) is Union
    return get_args(union)


def test_every_parameters_model_has_exactly_one_declaration_and_every_declaration_is_listed() -> None:
    declared = [k.params for k in KINDS]
    assert len(set(declared)) == len(declared), "a parameters model declared twice"
    for module in GROUPS:
        for name, obj in vars(module).items():
            if isinstance(obj, FaultKind):
                assert obj in KINDS, f"{module.__name__}.{name} is declared but not listed in KINDS"
            if (
                inspect.isclass(obj)
                and issubclass(obj, FaultParams)
                and obj.__module__ == module.__name__
                and "type" in obj.model_fields
            ):
                assert declared.count(obj) == 1, f"{obj.__name__} has no FaultKind declaration"
    members = _union_members(P.BuiltinFault)
    assert members == tuple(declared) == P.FAULT_MODELS
    for model in members:
        assert sum(k.params is model for k in KINDS) == 1, model


def test_every_declared_kind_is_in_every_derived_table() -> None:
    names = [k.name for k in KINDS]
    assert list(P.FAULT_TYPES) == names == list(BY_NAME)
    rows = catalog_rows(Support(backend="test"))
    assert [r["type"] for r in rows] == names
    for kind in KINDS:
        assert set(kind.backends) == set(BACKENDS), kind.name
        behaviour = BEHAVIOURS[kind.name]
        assert issubclass(behaviour, Behaviour) and behaviour.__name__ == kind.behaviour
        for target in kind.params.targets:
            assert isinstance(capabilities_of(kind.name, target), tuple)
        assert (kind.name in faultkinds.SOURCE_KINDS) == ("source" in kind.params.targets)
        assert (kind.name in NETWORK_FAULTS) == (kind.network is not None)
        if kind.network is not None and kind.network.toxic is not None:
            assert faultkinds.TOXICS[kind.name] is kind.network
            for toxic_types in (sim_faults.TOXIC_KINDS, toxiproxy.TOXIC_KINDS):
                assert kind.network.toxic in toxic_types
            assert set(kind.network.attributes.values()) <= set(kind.params.model_fields), kind.name
        kube = kind.backends["kube"]
        assert (kind.name in kube_faults.UNAVAILABLE) == isinstance(kube, Refused)
        assert (kind.name in kube_faults.NEEDS_CHAOS_MESH) == (
            isinstance(kube, Mechanism) and kube.via == "chaos-mesh"
        )
    assert NETWORK_FAULTS == faultkinds.NETWORK_FAULTS


def test_every_declared_kind_is_addressed_by_an_action_of_the_built_in_packs() -> None:
    addressed = addressed_by(p.addresses for p in get_catalog().packs if p.origin == "builtin")
    assert set(addressed) == set(BY_NAME)


def test_a_pack_naming_an_unknown_fault_kind_is_refused() -> None:
    """Each action declares the fault kinds it addresses (so it cannot name an action it lacks); a kind
    that neither the built-in declarations nor a plug-in declare is refused."""
    from dataclasses import replace

    core = next(p for p in get_catalog().packs if p.name == "core")
    first = replace(core.actions[0], addresses=("meltdown",))
    with pytest.raises(PackError, match="addresses name unknown fault kinds: meltdown"):
        _check_pack(replace(core, name="probe", actions=(first, *core.actions[1:])), "probe")


def test_only_the_declared_action_types_address_a_fault() -> None:
    from mlsandbox.faults.behaviours import behaviour_for

    entry = P.Perturbation.model_validate(
        {
            "name": "down",
            "when": {"at_step": 1},
            "target": "service:mlflow",
            "fault": {"type": "kill_service"},
        }
    )
    health = {"type": "get_service_health", "service": "mlflow"}
    assert not behaviour_for(entry).addresses(health)
    declared = addressed_by([{"get_service_health": ("kill_service",)}])
    assert behaviour_for(entry, addressed=declared).addresses(health)
    assert not behaviour_for(entry, addressed=declared).addresses({**health, "service": "minio"})
