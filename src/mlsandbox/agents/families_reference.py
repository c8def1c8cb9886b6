"""Reference solutions of the situation families (a scenario names one in ``reference_agent``).

Each is the reference checklist (:class:`~mlsandbox.agents.scripted.ReferenceAgent`) with the one skill
its situation asks for, found from what the agent observes (a log line, an error code), never from the
scenario's plan:

- :class:`DivergenceReferenceAgent`: a neural network whose loss becomes NaN; it reads the failed job's
  log and sets the learning rate explicitly (an order of magnitude at a time) until a job converges;
- :class:`CredentialsReferenceAgent`: data behind an API whose token is rotated, jobs that read their
  object-store credentials from the config store; it refreshes the source's credentials after a 401 and
  points a stale config credential back at the vault after a job fails to authenticate;
- :class:`OutageReferenceAgent`: a primary source that goes down for a while; it retries with a pause
  and falls back to another source of the same data when the primary stays down;
- :class:`LabelNoiseReferenceAgent`: a table whose profile shows conflicting duplicates (the same
  features with another label); it drops them before the usual cleaning;
- :class:`AlertTriageReferenceAgent`: a served model whose error or latency alert has two possible
  causes; it scales out only while a load alert fires, and restarts the feature service only when its
  health check fails;
- :class:`PriorityReferenceAgent`: several models on a rolling compute budget; it builds them in the
  order of their priority and deadline, and waits out a start refused for the compute window;
- :class:`ScorerEnvironmentReferenceAgent`: a production scorer pinned to an older scikit-learn; it
  builds an environment with the scorer's pins and trains in it, so the model loads where it is scored.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from typing import Any

from mlsandbox.agents.scripted import Obs, ReferenceAgent, Script, cleaning_plan, deliverable
from mlsandbox.agents.serving_reference import LOAD_METRICS, SLO_METRICS, ServingReferenceAgent

_TERMINAL = ("succeeded", "failed", "cancelled")
_DIVERGED = re.compile(r"diverged|loss is nan|loss is inf|non-finite", re.IGNORECASE)
_AUTH = re.compile(r"SignatureDoesNotMatch|InvalidAccessKeyId", re.IGNORECASE)
_LEARNING_RATE = "learning_rate_init"


class FamilyReferenceAgent(ReferenceAgent):
    """The reference checklist whose failed jobs are diagnosed from their logs: :meth:`diagnose` turns
    a failed job's log into a fix (new hyperparameters, actions to run first) or None (heal and retry)."""

    def __init__(self, seed: int | None = None, algorithm: str = "gradient_boosting") -> None:
        super().__init__(seed, algorithm=algorithm)
        self.hyperparams: dict[str, Any] = {}

    def diagnose(self, log: str) -> Generator[dict[str, Any], Obs, bool]:
        """Act on a failed job's log; True when something was changed (submit a new job), False to heal
        the platform and retry the same job."""
        return False
        yield {}  # a generator (never reached)

    def train_job(self, dataset: str) -> Generator[dict[str, Any], Obs, dict[str, Any] | None]:
        job: str | None = None
        for _ in range(self.max_attempts):
            if job is None:
                action: dict[str, Any] = {
                    "type": "train_model",
                    "dataset": dataset,
                    "algorithm": self.algorithm,
                    "resources": {"cpus": 1, "memory_mb": 1024},
                }
                if self.hyperparams:
                    action["hyperparams"] = dict(self.hyperparams)
            else:
                action = {"type": "retry_job", "job_id": job}
            obs = yield from self.do(action)
            if not obs.get("ok"):
                return None
            job = str(obs["result"]["job_id"])
            final = yield from self.await_job(job)
            result = (final.get("result") or {}) if final.get("ok") else {}
            if result.get("state") == "succeeded" and result.get("run_id"):
                return result
            logs = yield {"type": "get_logs", "target": job, "tail": 30}
            lines = ((logs.get("result") or {}).get("lines") or []) if logs.get("ok") else []
            text = "\n".join([*lines, str(result.get("log_tail") or ""), str(result.get("error") or "")])
            changed = yield from self.diagnose(text)
            if changed:
                job = None
            else:
                yield from self.heal()
        return None


class DivergenceReferenceAgent(FamilyReferenceAgent):
    """A neural network that diverges: read the log, set the learning rate explicitly (lower each time)."""

    name = "divergence-reference"

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed, algorithm="mlp")

    def diagnose(self, log: str) -> Generator[dict[str, Any], Obs, bool]:
        if not _DIVERGED.search(log):
            return False
        found = re.search(r"learning_rate_init=([0-9.eE+-]+)", log)
        current = float(found.group(1)) if found else float(self.hyperparams.get(_LEARNING_RATE, 0.1))
        # A known-good rate for this network, or ten times lower than the one that diverged (the log
        # names it; a solver error that does not is about the rate set last).
        self.hyperparams[_LEARNING_RATE] = min(0.01, current / 10.0)
        return True
        yield {}  # a generator (never reached)


class CredentialsReferenceAgent(FamilyReferenceAgent):
    """Data behind an API with a rotated token; jobs whose config store holds a stale credential."""

    name = "credentials-reference"

    def script(self, first: Obs) -> Script:
        model, _ = deliverable(first)
        obs = yield {"type": "list_sources"}
        sources = (obs.get("result") or {}).get("sources") or []
        if not sources:
            return
        dataset = yield from self.ingest(sources[0]["name"])
        if dataset is None:
            return
        dataset = yield from self.clean(dataset)
        run_id = yield from self.train(dataset)
        if run_id is not None:
            yield from self.do({"type": "register_model", "run_id": run_id, "name": model})

    def ingest(self, source: str) -> Generator[dict[str, Any], Obs, str | None]:
        action: dict[str, Any] = {"type": "ingest_source", "source": source}
        for _ in range(self.max_attempts):
            obs = yield action
            if obs.get("ok"):
                return str(obs["result"]["dataset"])
            code = (obs.get("error") or {}).get("code")
            if code == "auth_failed":
                action = {**action, "refresh_credentials": True}
            elif code in ("source_unavailable", "rate_limited", "backend_error"):
                yield {"type": "wait", "seconds": 10}
            else:
                return None
        return None

    def clean(self, dataset: str) -> Generator[dict[str, Any], Obs, str]:
        obs = yield from self.do({"type": "check_data_quality", "dataset": dataset})
        if obs.get("ok"):
            for strategy in cleaning_plan((obs.get("result") or {}).get("profile") or {}):
                obs = yield from self.do({"type": "clean_dataset", "dataset": dataset, "strategy": strategy})
                if obs.get("ok"):
                    dataset = str(obs["result"]["dataset"])
        return dataset

    def diagnose(self, log: str) -> Generator[dict[str, Any], Obs, bool]:
        if not _AUTH.search(log):
            return False
        # The job could not authenticate to the object store: compare the config with the vault's
        # references and point both credentials back at the vault.
        obs = yield {"type": "get_config"}
        refs = _secret_refs(obs)
        for key in ("s3_access_key_id", "s3_secret_access_key"):
            if key in refs:
                yield {"type": "set_config", "key": key, "value": refs[key]}
        return bool(refs)


_SECRET_HINTS = {"s3_access_key_id": "access-key", "s3_secret_access_key": "secret-key"}


def _secret_refs(obs: Obs) -> dict[str, str]:
    """Config key -> the vault reference ``get_config`` lists for it (``@secret:...-access-key``)."""
    result = (obs.get("result") or {}) if obs.get("ok") else {}
    refs = [r for r in result.get("references") or [] if isinstance(r, str) and r.startswith("@secret:")]
    out: dict[str, str] = {}
    for key, hint in _SECRET_HINTS.items():
        found = [r for r in refs if r.endswith(hint)]
        if found:
            out[key] = found[0]
    return out


class OutageReferenceAgent(CredentialsReferenceAgent):
    """A primary source down for a while: retry after a pause, fall back to another source of the same
    data when it stays down; never give up while a source may still answer."""

    name = "outage-reference"
    retries_before_fallback = 2

    def script(self, first: Obs) -> Script:
        model, _ = deliverable(first)
        obs = yield {"type": "list_sources"}
        sources = [s["name"] for s in (obs.get("result") or {}).get("sources") or []]
        dataset: str | None = None
        for _ in range(4):
            for source in sources:
                dataset = yield from self.try_source(source)
                if dataset is not None:
                    break
            if dataset is not None:
                break
            yield {"type": "wait", "seconds": 30}
        if dataset is None:
            return
        dataset = yield from self.clean(dataset)
        run_id = yield from self.train(dataset)
        if run_id is not None:
            yield from self.do({"type": "register_model", "run_id": run_id, "name": model})

    def try_source(self, source: str) -> Generator[dict[str, Any], Obs, str | None]:
        action: dict[str, Any] = {"type": "ingest_source", "source": source}
        for attempt in range(self.retries_before_fallback + 1):
            obs = yield action
            if obs.get("ok"):
                return str(obs["result"]["dataset"])
            code = (obs.get("error") or {}).get("code")
            if code == "auth_failed":
                action = {**action, "refresh_credentials": True}
            elif code in ("source_unavailable", "rate_limited", "backend_error"):
                if attempt < self.retries_before_fallback:
                    yield {"type": "wait", "seconds": 10}
            else:
                return None
        return None


class LabelNoiseReferenceAgent(ReferenceAgent):
    """Rows that repeat others' features with another label: drop them (the first-seen label stays),
    then clean and train as the reference checklist does."""

    name = "label-noise-reference"

    def cleaning(self, profile: dict[str, Any]) -> list[str]:
        conflicts = int(profile.get("conflicting_duplicate_rows") or 0)
        return (["drop_conflicting_duplicates"] if conflicts else []) + cleaning_plan(profile)


class AlertTriageReferenceAgent(ServingReferenceAgent):
    """On-call for a served model whose alerts have two possible causes: a burst of traffic (a load
    alert fires: scale out, then back) or the feature service down (an error or latency alert without a
    load alert, and the feature service fails its health check: restart it). It never treats a cause
    it has not seen."""

    name = "alert-triage-reference"
    looks = 30
    """Looks at the alerts (every ``every_s`` seconds) after the deploy, at most."""
    min_looks = 24
    """Looks before it may stop: the SLO is judged over all the time traffic ran."""
    every_s = 5.0
    quiet_looks = 6
    """Looks without any firing alert, after one was handled, to stop at."""

    def script(self, first: Obs) -> Script:
        model, names = deliverable(first)
        if not names:
            return
        dataset = yield from self.clean(names[0])
        run_id = yield from self.train(dataset)
        if run_id is None:
            return
        obs = yield from self.do({"type": "register_model", "run_id": run_id, "name": model})
        if not obs.get("ok"):
            return
        version = obs["result"]["version"]
        obs = yield {"type": "get_alerts"}
        rules = (obs.get("result") or {}).get("rules") or [] if obs.get("ok") else []
        load = {r["rule"] for r in rules if str(r.get("condition", "")).split(" ", 1)[0] in LOAD_METRICS}
        slo = {r["rule"] for r in rules if str(r.get("condition", "")).split(" ", 1)[0] in SLO_METRICS}
        obs = yield from self.do({"type": "deploy_model", "name": model, "version": version, "replicas": 1})
        if not obs.get("ok"):
            return
        deployment = str(obs["result"].get("deployment") or model)
        yield from self.triage(deployment, load, slo)

    def triage(self, deployment: str, load: set[str], slo: set[str]) -> Generator[dict[str, Any], Obs, None]:
        scaled, handled, quiet = False, False, 0
        for look in range(self.looks):
            yield {"type": "wait", "seconds": self.every_s}
            obs = yield {"type": "get_alerts", "active_only": True}
            alerts = (obs.get("result") or {}).get("alerts", []) if obs.get("ok") else []
            firing = {a.get("rule") for a in alerts if a.get("state") == "firing"}
            if firing & load:
                handled, quiet = True, 0
                if not scaled:
                    obs = yield {"type": "scale", "deployment": deployment, "replicas": self.surge_replicas}
                    scaled = bool(obs.get("ok"))
                continue
            if scaled:  # the burst is over: give the replicas back
                obs = yield {"type": "scale", "deployment": deployment, "replicas": 1}
                scaled = not obs.get("ok")
            if firing & slo:
                handled, quiet = True, 0
                health = yield {"type": "get_service_health", "service": "feature-service"}
                if health.get("ok") and not (health.get("result") or {}).get("healthy", True):
                    yield {"type": "restart_service", "service": "feature-service"}
                continue
            quiet += 1
            if handled and quiet >= self.quiet_looks and look + 1 >= self.min_looks:
                return


__all__ = [
    "AlertTriageReferenceAgent",
    "CredentialsReferenceAgent",
    "DivergenceReferenceAgent",
    "FamilyReferenceAgent",
    "LabelNoiseReferenceAgent",
    "OutageReferenceAgent",
]


class PriorityReferenceAgent(ReferenceAgent):
    """Several models asked at once (the first observation's ``deliverable.models``), on a rolling
    compute budget: the reference checklist for each model, high priority and nearest deadline first, on
    the Parquet copy of its data; a start refused because the compute window is spent is waited out
    (the refusal's ``retry_after_s``) and tried again."""

    name = "reference-priority"
    max_window_waits = 6
    last: Obs = {}
    """The last observation an action of the checklist returned (its budget says whether the window is
    spent)."""

    def script(self, first: Obs) -> Script:
        self.last = first
        models = ((first.get("result") or {}).get("deliverable") or {}).get("models")
        if not models:
            yield from super().script(first)
            return
        order = sorted(
            models, key=lambda m: (m.get("priority") != "high", m.get("deadline_s") or float("inf"))
        )
        for m in order:
            names = sorted(m.get("datasets") or [], key=lambda n: (not n.endswith(".parquet"), n))
            if not names:
                continue
            dataset = yield from self.prepare(names[0])
            run_id = yield from self.train(dataset)
            if run_id is not None:
                yield from self.do(
                    {"type": "register_model", "run_id": run_id, "name": m["register_model_as"]}
                )

    def train(self, dataset: str) -> Generator[dict[str, Any], Obs, str | None]:
        """Wait out a spent compute window (the budget says when it frees) before starting the job."""
        frees = (self.last.get("budget") or {}).get("window_frees_in_s")
        if frees:
            yield from self._wait(float(frees))
        return (yield from super().train(dataset))

    def _wait(self, seconds: float) -> Generator[dict[str, Any], Obs, None]:
        left = round(seconds + 1.0, 1)
        while left > 0:
            self.last = yield {"type": "wait", "seconds": min(60.0, left)}
            left = round(left - 60.0, 1)

    def do(self, action: dict[str, Any]) -> Generator[dict[str, Any], Obs, Obs]:
        obs: Obs = {}
        for _ in range(self.max_window_waits):
            obs = self.last = yield from super().do(action)
            error = obs.get("error") or {}
            details = error.get("details")
            after = details.get("retry_after_s") if isinstance(details, dict) else None
            if obs.get("ok") or error.get("code") != "budget_exhausted" or after is None:
                return obs
            yield from self._wait(float(after))
        return obs


class ScorerEnvironmentReferenceAgent(ReferenceAgent):
    """The reference checklist when the model is scored in a pinned environment (the first observation's
    ``deliverable.scored_in_environment``): it builds an environment with the same pins first and trains
    every job in it; without such pins it is the plain checklist."""

    name = "reference-scorer-environment"
    environment_name = "scorer"

    def script(self, first: Obs) -> Script:
        self.environment = None
        pins = ((first.get("result") or {}).get("deliverable") or {}).get("scored_in_environment")
        if pins:
            obs = yield from self.do(
                {"type": "create_environment", "name": self.environment_name, "requirements": list(pins)}
            )
            if obs.get("ok"):
                self.environment = self.environment_name
        yield from super().script(first)
