"""Fidelity per kind of work: traces carry the kind and the goal metric, triples the metric's difference,
and the index's per-kind figures (success agreement, metric error)."""

from __future__ import annotations

from mlsandbox.fidelity.compare import EpisodeTrace, compare
from mlsandbox.fidelity.report import FidelityIndex, kind_figures


def _trace(backend: str, kind: str, metric: str, value: float | None, success: bool) -> EpisodeTrace:
    return EpisodeTrace(
        backend=backend,
        scenario=f"{kind}-family",
        agent="reference",
        seed=1,
        success=success,
        kind=kind,
        metric=metric,
        holdout_metric=value,
    )


def test_kind_figures_report_success_agreement_and_metric_error() -> None:
    triples = [
        compare(_trace("local", "tabular_regression", "rmse", 4.0, True), _trace("sim", "tabular_regression", "rmse", 4.4, True)),
        compare(_trace("local", "tabular_regression", "rmse", 5.0, True), _trace("sim", "tabular_regression", "rmse", 5.0, False)),
        compare(_trace("local", "tabular", "roc_auc", 0.8, True), _trace("sim", "tabular", "roc_auc", None, False)),
    ]  # fmt: skip
    assert triples[0].metric_diff is not None and abs(triples[0].metric_diff - 0.4) < 1e-9
    kinds = kind_figures(triples)
    reg = kinds["tabular_regression"]
    assert reg.triples == 2 and reg.success_agreement == 0.5 and reg.metrics == ["rmse"]
    assert reg.metric_pairs == 2 and reg.max_abs_metric_diff is not None
    assert abs(reg.max_abs_metric_diff - 0.4) < 1e-9
    assert reg.median_rel_metric_error is not None and abs(reg.median_rel_metric_error - 0.05) < 1e-9
    assert kinds["tabular"].metric_pairs == 0 and kinds["tabular"].success_agreement == 0.0


def test_an_index_written_before_kinds_still_loads() -> None:
    index = FidelityIndex.model_validate(
        {
            "created": "x",
            "backends": ["local", "sim"],
            "seeds": 1,
            "base_seed": 0,
            "agents": ["rule"],
            "machine": {},
            "figures": {
                "triples": 0, "comparable": 0, "success_agreement": None, "median_abs_auc_diff": None,
                "auc_pairs": 0, "mean_reward_diff": None, "mean_abs_reward_diff": None, "mean_steps_local": None,
                "mean_steps_sim": None, "diverged": 0, "median_divergence_step": None, "job_duration_ks": None,
                "job_cpu_ks": None, "jobs_local": 0, "jobs_sim": 0,
            },
            "targets": {},
            "scenarios": {},
            "pages": {},
        }
    )  # fmt: skip
    assert index.kinds == {}
