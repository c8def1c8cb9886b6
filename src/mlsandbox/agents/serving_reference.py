"""The reference solution of the built-in serving scenarios (``serving`` action pack).

inspect and clean -> train -> register -> read the alert rules (``get_alerts``) -> deploy -> test the
deployment with a request -> act as an on-call engineer would for what the rules watch:

* a load rule (a rule on ``client_rps``): deploy with two replicas; poll the alerts; when it fires, scale
  out; when it resolves, scale back to one replica;
* drift rules (``feature_drift_psi`` or ``live_accuracy``): poll the alerts; when one fires, confirm the
  drift in the metrics, wait until enough labelled production rows are in the lake, retrain on them and,
  if the new run's validation AUC passes, register it and roll it out to the same deployment;
* otherwise: let traffic run a little, watch the metrics, wait out a firing SLO alert (a cold start).

It sees the sandbox only through actions and their observations, and stays within the step budget:
every wait is followed by one look, and each watch stops after a bounded number of looks.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from mlsandbox.agents.kind_reference import observed_kind
from mlsandbox.agents.scripted import Obs, ReferenceAgent, Script, cleaning_plan, deliverable
from mlsandbox.tasks.kind import TaskKind
from mlsandbox.tasks.registry import DEFAULT_KIND, get

LOAD_METRICS = ("client_rps", "rps")
"""Metrics whose rules say the load rose (scale out while they fire)."""
DRIFT_METRICS = ("feature_drift_psi", "live_accuracy")
"""Metrics whose rules say production no longer looks like the training data."""
SLO_METRICS = ("latency_p99_ms", "client_latency_p99_ms", "error_rate", "client_error_rate")

LABELLED = "prod/labelled.parquet"
"""Where the serving pack publishes production rows with their true labels."""

_TERMINAL = ("succeeded", "failed", "cancelled")

Gen = Generator[dict[str, Any], Obs, Any]


def _result(obs: Obs) -> dict[str, Any]:
    return (obs.get("result") or {}) if obs.get("ok") else {}


def _rule_metric(rule: dict[str, Any]) -> str:
    return str(rule.get("condition", "")).split(" ", 1)[0]


def _firing(obs: Obs, rules: set[str]) -> list[dict[str, Any]]:
    return [
        a for a in _result(obs).get("alerts", []) if a.get("rule") in rules and a.get("state") == "firing"
    ]


def typical_row(profile: dict[str, Any]) -> dict[str, Any]:
    """A feature row of typical values from a data-quality profile (medians, most frequent categories)."""
    target = (profile.get("target") or {}).get("name")
    row: dict[str, Any] = {}
    for name, col in (profile.get("column_profiles") or {}).items():
        if name == target:
            continue
        if col.get("median") is not None:
            row[name] = col["median"]
        elif col.get("top_values"):
            row[name] = col["top_values"][0]["value"]
        else:
            return {}
    return row


class ServingReferenceAgent(ReferenceAgent):
    name = "serving-reference"

    surge_replicas = 3
    """Replicas while a load alert fires (the serving scenarios allow at most 4 in all)."""
    min_val_auc = 0.7
    """Validation AUC a retrained model needs before it is rolled out."""
    min_labelled_rows = 500
    """Labelled production rows to wait for before retraining on them."""
    max_looks = 12
    """Looks (a wait and an observation) per watch."""
    min_watch_looks = 4
    """Looks of 15 s before a plain SLO watch may end (a minute of traffic)."""

    def __init__(self, seed: int | None = None, algorithm: str = "logistic_regression") -> None:
        super().__init__(seed, algorithm=algorithm)
        self.profile: dict[str, Any] = {}
        self.kind: TaskKind = get(DEFAULT_KIND)
        self.published = False
        """Whether the labelled production table was seen in the lake (it stays once published)."""
        self.row_rate = 0.0
        """Labelled production rows per second, as last seen arriving (0: not seen yet)."""

    def script(self, first: Obs) -> Script:
        model, names = deliverable(first)
        if not names:
            return
        self.kind = observed_kind(first)
        self.published, self.row_rate = False, 0.0
        dataset = yield from self.clean(names[0])
        run_id = yield from self.train(dataset)
        if run_id is None:
            return
        obs = yield from self.do({"type": "register_model", "run_id": run_id, "name": model})
        if not obs.get("ok"):
            return
        version = obs["result"]["version"]
        # The alert rules say what to watch for (they are known before anything is deployed).
        obs = yield {"type": "get_alerts"}
        rules = _result(obs).get("rules") or []
        load = {r["rule"] for r in rules if _rule_metric(r) in LOAD_METRICS}
        drift = {r["rule"] for r in rules if _rule_metric(r) in DRIFT_METRICS}
        # A burst is expected: start with headroom, so the first seconds of it are served while more start.
        replicas = 2 if load else 1
        obs = yield from self.do(
            {"type": "deploy_model", "name": model, "version": version, "replicas": replicas}
        )
        if not obs.get("ok"):
            return
        deployment = str(obs["result"].get("deployment") or model)
        row = typical_row(self.profile)
        if row:
            yield {"type": "predict", "deployment": deployment, "instances": [row]}
        if load:
            yield from self.ride_out_surge(deployment, load)
        elif drift:
            yield from self.retrain_on_drift(deployment, model, drift)
        else:
            slo = {r["rule"] for r in rules if _rule_metric(r) in SLO_METRICS}
            yield from self.watch(deployment, slo)

    # -------------------------------------------------------------------------------- the three watches

    def watch(self, deployment: str, slo: set[str]) -> Gen:
        """Let traffic run for a minute at least; while an SLO alert fires (a cold start, say) keep watching
        a little longer. The SLO is judged over all the time traffic ran: the slow first requests of a
        cold start (one SLO window of violation on a loaded machine) must not weigh more than its share."""
        for look in range(6):
            yield {"type": "wait", "seconds": 15}
            yield {"type": "get_metrics", "target": deployment, "window_s": 15}
            obs = yield {"type": "get_alerts", "active_only": True}
            if look >= self.min_watch_looks - 1 and not _firing(obs, slo):
                return

    def ride_out_surge(self, deployment: str, load: set[str]) -> Gen:
        """Scale out while a load alert fires, back to one replica once it resolved."""
        surge = yield from self.until(lambda obs: bool(_firing(obs, load)), 4)
        if not surge:
            return
        for replicas in range(self.surge_replicas, 1, -1):
            obs = yield {"type": "scale", "deployment": deployment, "replicas": replicas}
            if obs.get("ok"):
                break
        else:
            return
        yield from self.until(lambda obs: not _firing(obs, load), 15)
        yield {"type": "scale", "deployment": deployment, "replicas": 1}
        names = ["client_rps", "replicas_up"]
        yield {"type": "get_metrics", "target": deployment, "names": names, "window_s": 120}

    def retrain_on_drift(self, deployment: str, model: str, drift: set[str]) -> Gen:
        """On a drift alert: retrain on labelled production rows and roll out a version that validates."""
        drifted = yield from self.until(lambda obs: bool(_firing(obs, drift)), 10)
        if not drifted:
            return
        yield {
            "type": "get_metrics",
            "target": deployment,
            "names": ["feature_drift_psi", "live_accuracy"],
        }
        rows = yield from self.labelled_rows(self.min_labelled_rows)
        for _ in range(2):
            if rows < self.min_labelled_rows:
                return
            job = yield from self.train_job(LABELLED)
            if job is None:
                return
            if self.validates(job.get("metrics") or {}):
                obs = yield from self.do({"type": "register_model", "run_id": job["run_id"], "name": model})
                if obs.get("ok"):
                    version = obs["result"]["version"]
                    yield from self.do(
                        {"type": "deploy_model", "name": model, "version": version, "deployment": deployment}
                    )
                return
            # Not good enough yet: more recent rows help.
            rows = yield from self.labelled_rows(2 * rows)

    # -------------------------------------------------------------------------------- building blocks

    def validates(self, metrics: dict[str, Any]) -> bool:
        """Whether a retrained run is good enough to roll out: ``val_auc`` of at least ``min_val_auc``
        for a binary classifier; another kind's default metric logged and finite."""
        if self.kind.name == DEFAULT_KIND:
            auc = metrics.get("val_auc")
            return auc is not None and auc >= self.min_val_auc
        value = metrics.get(self.kind.metric().logged)
        return value is not None and value == value

    def until(self, done: Any, every_s: float) -> Generator[dict[str, Any], Obs, bool]:
        """Look at the alerts every ``every_s`` seconds until ``done(observation)``; whether it came."""
        for _ in range(self.max_looks):
            yield {"type": "wait", "seconds": every_s}
            obs = yield {"type": "get_alerts", "active_only": True}
            if obs.get("ok") and done(obs):
                return True
        return False

    def labelled_rows(self, wanted: int) -> Generator[dict[str, Any], Obs, int]:
        """Wait until the labelled production table has ``wanted`` rows; the rows it has. Between two
        looks it waits as long as the rows seen arriving say the rest takes (15 to 60 s, a quarter more
        for the traffic's ups and downs), so a long wait costs few steps."""
        rows, pause = 0, 15.0
        for _ in range(self.max_looks):
            if not self.published:
                obs = yield {"type": "list_datasets"}
                self.published = any(d.get("name") == LABELLED for d in _result(obs).get("datasets", []))
            if self.published:
                obs = yield {"type": "check_data_quality", "dataset": LABELLED}
                seen = int((_result(obs).get("profile") or {}).get("rows") or 0)
                if seen >= wanted:
                    return seen
                if 0 < rows < seen:  # rows per second over the last pause
                    self.row_rate = (seen - rows) / pause
                if self.row_rate:
                    pause = min(60.0, max(15.0, 1.25 * (wanted - seen) / self.row_rate))
                rows = seen
            yield {"type": "wait", "seconds": round(pause, 1)}
        return rows

    def clean(self, dataset: str) -> Generator[dict[str, Any], Obs, str]:
        obs = yield from self.do({"type": "check_data_quality", "dataset": dataset})
        self.profile = _result(obs).get("profile") or {}
        plan = cleaning_plan(self.profile)
        if (
            self.kind.name != DEFAULT_KIND
        ):  # another kind: its own policy (binary keeps the agent's algorithm)
            policy = self.kind.policy(self.profile)
            plan, self.algorithm = list(policy.preparations), policy.algorithm
        for strategy in plan:
            obs = yield from self.do({"type": "clean_dataset", "dataset": dataset, "strategy": strategy})
            if obs.get("ok"):
                dataset = obs["result"]["dataset"]
        return dataset

    def await_job(self, job_id: str) -> Generator[dict[str, Any], Obs, Obs]:
        """Wait (a wait returns as soon as a job changes state) until the job is over; then ``get_job``."""
        for _ in range(20):
            obs = yield {"type": "wait", "seconds": 60}
            states = {j["job_id"]: j["state"] for j in _result(obs).get("jobs", [])}
            if states.get(job_id) in _TERMINAL:
                break
        return (yield {"type": "get_job", "job_id": job_id})
