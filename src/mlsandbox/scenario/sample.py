"""A representative sample of the catalogue: the fewest families that together show every situation.

The catalogue grows faster than a CI run can play it on real services. What a family exercises is read
from its declaration as *features*: its kind of work and metric, its goal type, each fault type it
injects and the target it hits, each data-source type and source defect, production traffic, its
spikes and drift, a team, pipelines, its reference agent and its difficulty. :func:`representative` picks, greedily,
the family that covers the most features not yet covered (ties: the quicker one, lower difficulty and no
production traffic first, then by id) until every feature of the catalogue is covered. So every kind,
every goal, every fault type, every source and every reference agent is played, and a new family that
brings nothing new does not lengthen the run; one that brings a new situation joins it.

The whole catalogue is validated by a benchmark (``benchmarks/bench_catalog.py``), not by this sample.
"""

from __future__ import annotations

from collections.abc import Iterable

from mlsandbox.scenario.models import Scenario

DEFECT_FIELDS = frozenset(
    {
        # tables (their ``defects``)
        "missing_rate", "outlier_rate", "injections",
        # time series
        "late", "gaps", "level_shifts", "holiday_effects",
        # documents
        "label_noise", "duplicate_rate", "empty_rate", "truncated_rate", "drift",
        # images
        "shift", "unreadable_rate", "size_mismatch_rate",
    }
)  # fmt: skip
"""The dataset fields whose non-default value is a defect an agent has to handle."""


def _defects(dataset: object) -> set[str]:
    dump = dataset.model_dump(mode="json", exclude_defaults=True)  # type: ignore[attr-defined]
    fields = set(dump) | set(dump.get("defects") or {})
    return {f"defect:{f}" for f in fields & DEFECT_FIELDS}


def features(sc: Scenario) -> frozenset[str]:
    """What a scenario exercises, as named features (see the module docstring)."""
    kind, metric = sc.work()
    out = {f"kind:{kind}", f"metric:{metric}", f"goal:{sc.goal.type}", f"reference:{sc.reference_agent}"}
    out.add(f"difficulty:{sc.difficulty}")
    for dataset in sc.datasets:
        out |= _defects(dataset)
    for p in sc.perturbations:
        fault = str(getattr(p.fault, "type", p.fault))
        out.add(f"fault:{fault}")
        if p.target:
            out.add(f"fault-target:{p.target.split(':', 1)[0]}:{fault}")
    for src in sc.sources:
        out.add(f"source:{src.type}")
        for d in getattr(src, "drifts", None) or []:
            out.add(f"source-drift:{d.type}")
        if getattr(src, "schema_changes", None):
            out.add("source:schema-change")
    if sc.serving is not None:
        out.add("serving")
        traffic = sc.serving.traffic
        for what in ("drift", "spikes", "daily_amplitude"):
            if traffic is not None and getattr(traffic, what, None):
                out.add(f"traffic:{what}")
    if sc.team is not None:
        out.add("team")
    if sc.pipelines.upstream or sc.pipelines.start_runs:
        out.add("pipelines")
    out |= {f"constraint:{c}" for c in sc.constraints.model_dump(exclude_defaults=True)}
    return frozenset(out)


def _cost(sc: Scenario) -> tuple[int, int]:
    """Lower is quicker to play on real services: no production traffic, then lower difficulty."""
    return (1 if sc.serving is not None else 0, sc.difficulty)


def representative(scenarios: Iterable[Scenario]) -> list[str]:
    """The ids of a greedy set cover of the scenarios' features, in the order picked."""
    pool = {sc.id: sc for sc in scenarios}
    feats = {sid: features(sc) for sid, sc in pool.items()}
    uncovered = set().union(*feats.values()) if feats else set()
    picked: list[str] = []
    while uncovered:
        best = min(
            (sid for sid in pool if sid not in picked),
            key=lambda sid: (-len(feats[sid] & uncovered), _cost(pool[sid]), sid),
        )
        picked.append(best)
        uncovered -= feats[best]
    return picked


def catalog_sample() -> list[str]:
    """The representative sample of the built-in catalogue, sorted by id."""
    from mlsandbox.scenario.loader import catalog_ids, load_builtin

    return sorted(representative(load_builtin(sid) for sid in catalog_ids()))


__all__ = ["catalog_sample", "features", "representative"]
