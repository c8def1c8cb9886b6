"""Off-path probes: scripted episodes that leave the path the reference and rule agents walk.

A twin that agrees with the real world only where scripted agents go is a twin an optimiser will fool
(a one-stump forest that "succeeds" in sim and fails in real). Each probe plays the reference checklist
(inspect, clean, train, wait, register, submit) with one thing changed: an algorithm, an extreme or tiny
hyperparameter, the cleaning left out or done in another order, the wrong dataset. ``mlsandbox fidelity
--probe`` plays every probe on both backends and compares what they report.

A probe is named ``probe:<name>`` wherever an agent is named (``make_agent("probe:rf-stump")``).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from mlsandbox.agents.scripted import Obs, ReferenceAgent, cleaning_plan


@dataclass(frozen=True)
class Probe:
    """One off-path variation of the reference checklist."""

    name: str
    what: str
    algorithm: str = "gradient_boosting"
    hyperparams: dict[str, Any] = field(default_factory=dict)
    cleaning: str = "profile"
    """``profile`` (what the data profile calls for, as the reference does), ``none`` (train on the raw
    rows), ``reversed`` (the same strategies in the opposite order), ``drop`` (drop every row with a
    missing value, nothing else)."""
    dataset: str = "deliverable"
    """``deliverable`` (the dataset the goal names) or ``other`` (another dataset of the episode when it
    has one: the wrong data)."""


PROBES: dict[str, Probe] = {
    p.name: p
    for p in (
        Probe("lr-default", "logistic regression, defaults", "logistic_regression"),
        Probe("lr-c-tiny", "logistic regression, C = 1e-6 (all but the intercept shrunk away)",
              "logistic_regression", {"C": 1e-6}),
        Probe("lr-c-huge", "logistic regression, C = 1e6 (no regularisation)", "logistic_regression", {"C": 1e6}),
        Probe("rf-default", "random forest, defaults", "random_forest"),
        Probe("rf-stump", "random forest of one tree of depth 1", "random_forest",
              {"n_estimators": 1, "max_depth": 1}),
        Probe("rf-huge-leaves", "random forest whose leaves hold half the rows", "random_forest",
              {"min_samples_leaf": 1000}),
        Probe("gb-default", "gradient boosting, defaults", "gradient_boosting"),
        Probe("gb-lr-zero", "gradient boosting, learning rate 1e-9", "gradient_boosting", {"learning_rate": 1e-9}),
        Probe("gb-one-iteration", "gradient boosting, one iteration", "gradient_boosting", {"max_iter": 1}),
        Probe("gb-lr-huge", "gradient boosting, learning rate 10", "gradient_boosting", {"learning_rate": 10.0}),
        Probe("mlp-default", "MLP, defaults", "mlp"),
        Probe("mlp-one-epoch", "MLP, one epoch", "mlp", {"max_iter": 1}),
        Probe("mlp-lr-tiny", "MLP, learning rate 1e-7", "mlp", {"learning_rate_init": 1e-7}),
        Probe("mlp-lr-huge", "MLP, learning rate 100 (diverges)", "mlp", {"learning_rate_init": 100.0}),
        Probe("raw-gb", "gradient boosting on the raw rows (no cleaning)", cleaning="none"),
        Probe("raw-lr", "logistic regression on the raw rows (refuses missing values)",
              "logistic_regression", cleaning="none"),
        Probe("reversed-cleaning", "the cleaning strategies in the opposite order", "logistic_regression",
              cleaning="reversed"),
        Probe("drop-na", "drop every row with a missing value, nothing else", "random_forest", cleaning="drop"),
        Probe("wrong-dataset", "train on another dataset than the one the goal names", dataset="other"),
    )
}  # fmt: skip
"""Every probe, by name."""


class ProbeAgent(ReferenceAgent):
    """The reference checklist with a :class:`Probe`'s change (one attempt per job: a probe measures what
    the change does, it does not work around it)."""

    name = "probe"
    max_attempts = 1

    def __init__(self, probe: Probe, seed: int | None = None) -> None:
        super().__init__(seed, algorithm=probe.algorithm)
        self.probe = probe
        self.name = f"probe:{probe.name}"

    def choose_dataset(self, names: list[str]) -> Generator[dict[str, Any], Obs, str]:
        if self.probe.dataset != "other":
            return names[0]
        listed = yield {"type": "list_datasets"}
        others = [
            str(d.get("name"))
            for d in (listed.get("result") or {}).get("datasets", [])
            if d.get("name") not in names
        ]
        return others[0] if others else names[0]

    def cleaning(self, profile: dict[str, Any]) -> list[str]:
        plan = cleaning_plan(profile)
        if self.probe.cleaning == "none":
            return []
        if self.probe.cleaning == "reversed":
            return list(reversed(plan))
        if self.probe.cleaning == "drop":
            return ["drop_na"]
        return plan

    def train_job(self, dataset: str) -> Generator[dict[str, Any], Obs, dict[str, Any] | None]:
        obs = yield {
            "type": "train_model",
            "dataset": dataset,
            "algorithm": self.probe.algorithm,
            "hyperparams": dict(self.probe.hyperparams),
            "resources": {"cpus": 1, "memory_mb": 1024},
        }
        if not obs.get("ok"):
            return None
        final = yield from self.await_job(str(obs["result"]["job_id"]))
        result = (final.get("result") or {}) if final.get("ok") else {}
        if result.get("state") == "succeeded" and result.get("run_id"):
            return result
        yield {"type": "get_logs", "target": str(obs["result"]["job_id"]), "tail": 20}
        return None


def make_probe(name: str, seed: int | None = None) -> ProbeAgent:
    """The agent of probe ``name`` (with or without its ``probe:`` prefix)."""
    key = name.removeprefix("probe:")
    if key not in PROBES:
        raise ValueError(f"unknown probe {key!r}; probes: {', '.join(PROBES)}")
    return ProbeAgent(PROBES[key], seed=seed)


__all__ = ["PROBES", "Probe", "ProbeAgent", "make_probe"]
