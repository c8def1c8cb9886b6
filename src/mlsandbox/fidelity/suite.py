"""The whole comparison: scenarios x seeds x agents on two backends, a page per scenario, an index."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mlsandbox.fidelity.compare import TripleComparison
from mlsandbox.fidelity.report import (
    AUC_DIFF_TARGET,
    SUCCESS_AGREEMENT_TARGET,
    FidelityIndex,
    ScenarioFidelity,
    figures,
    kind_figures,
    now,
    write_index,
    write_scenario,
)
from mlsandbox.fidelity.run import AGENTS, Backends, run_triples
from mlsandbox.scenario import load_scenario


def run_fidelity(
    scenarios: list[str],
    out: Path,
    *,
    seeds: int = 1,
    agents: tuple[str, ...] = AGENTS,
    base_seed: int = 0,
    backends: tuple[str, str] = ("local", "sim"),
    sandbox: str = "fidelity",
    on_triple: Callable[[TripleComparison], None] | None = None,
) -> FidelityIndex:
    """Run and compare every (scenario, seed, agent); write ``<scenario>.json|html`` as each scenario is
    done and ``index.json|html`` at the end. Unknown scenarios fail before anything runs."""
    from mlsandbox.machine import describe

    loaded = [load_scenario(s) for s in scenarios]
    machine = describe()
    pairs = Backends.open(backends[0], backends[1], sandbox=sandbox)
    per_scenario: dict[str, ScenarioFidelity] = {}
    pages: dict[str, str] = {}
    meta = f"{backends[0]} against {backends[1]} · {machine['cpus']} x {machine['cpu_model']} · {now()}"
    try:
        for sc in loaded:
            triples = run_triples(
                pairs, sc, seeds=seeds, agents=agents, base_seed=base_seed, on_triple=on_triple
            )
            sf = ScenarioFidelity(scenario=sc.id, figures=figures(triples), triples=triples)
            per_scenario[sc.id] = sf
            pages[sc.id] = write_scenario(out, sf, meta)
    finally:
        pairs.close()
    every = [t for sf in per_scenario.values() for t in sf.triples]
    index = FidelityIndex(
        created=now(),
        backends=backends,
        seeds=seeds,
        base_seed=base_seed,
        agents=list(agents),
        machine=machine,
        figures=figures(every),
        targets={"success_agreement": SUCCESS_AGREEMENT_TARGET, "median_abs_auc_diff": AUC_DIFF_TARGET},
        scenarios={sid: sf.figures for sid, sf in per_scenario.items()},
        pages=pages,
        kinds=kind_figures(every),
    )
    write_index(out, index)
    return index


__all__ = ["run_fidelity"]
