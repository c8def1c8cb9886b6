"""Degenerate strategies that a reward must not pay for (the anti reward-hacking tests run them).

- ``do-nothing``: submits at once.
- ``repeat-cheap``: repeats the cheapest action (``list_datasets``) until the episode runs out of steps.
- ``spam-jobs``: launches many tiny training jobs on the raw data, registers the best by validation
  score (the dataset kind's default metric as the trainer logs it, in its direction), submits -- no
  inspection, no cleaning; the algorithms are the kind's (``deliverable.kind``).
- ``deploy-unevaluated``: trains once on the raw data, registers and deploys the model without any
  evaluation (it applies to serving scenarios; elsewhere it is a plain single-job policy).
"""

from __future__ import annotations

from typing import Any

from mlsandbox.agents.kind_reference import observed_kind, quick_algorithms
from mlsandbox.agents.scripted import Obs, Script, ScriptedAgent, deliverable


class DoNothingAgent(ScriptedAgent):
    name = "do-nothing"

    def script(self, first: Obs) -> Script:
        yield {"type": "submit"}


class RepeatCheapAgent(ScriptedAgent):
    name = "repeat-cheap"

    def script(self, first: Obs) -> Script:
        while True:
            yield {"type": "list_datasets"}


class SpamJobsAgent(ScriptedAgent):
    name = "spam-jobs"
    jobs = 8
    registered: tuple[str, str] | None = None

    def script(self, first: Obs) -> Script:
        model, names = deliverable(first)
        if not names:
            return
        raw = [n for n in names if n.startswith("raw/")] or names
        kind = observed_kind(first)
        algorithms, metric = quick_algorithms(kind), kind.metric()
        job_ids: list[str] = []
        for i in range(self.jobs):
            obs = yield {
                "type": "train_model",
                "dataset": raw[i % len(raw)],
                "algorithm": algorithms[i % len(algorithms)],
                "resources": {"cpus": 0.25, "memory_mb": 256},
            }
            if obs.get("ok"):
                job_ids.append(obs["result"]["job_id"])
        best: tuple[float, str] | None = None
        for _ in range(12):
            obs = yield {"type": "wait", "seconds": 20}
            states = [j.get("state") for j in (obs.get("result") or {}).get("jobs", [])]
            if states and all(s in ("succeeded", "failed", "cancelled") for s in states):
                break
        obs = yield {"type": "list_runs"}
        for run in (obs.get("result") or {}).get("runs", []):
            value = (run.get("metrics") or {}).get(metric.logged)
            if (
                run.get("status") == "FINISHED"
                and isinstance(value, int | float)
                and (best is None or (metric.better(value, best[0]) and value != best[0]))
            ):
                best = (float(value), run["run_id"])
        if best is not None:
            obs = yield {"type": "register_model", "run_id": best[1], "name": model}
            if obs.get("ok"):
                self.registered = (model, str(obs["result"]["version"]))


class DeployUnevaluatedAgent(SpamJobsAgent):
    """One job, registered and deployed at once, without any evaluation."""

    name = "deploy-unevaluated"
    jobs = 1

    def script(self, first: Obs) -> Script:
        self.registered = None
        yield from super().script(first)
        actions: list[Any] = list((first.get("result") or {}).get("actions") or [])
        if "deploy_model" in actions and self.registered is not None:
            name, version = self.registered
            yield {"type": "deploy_model", "name": name, "version": version}


DEGENERATE = {a.name: a for a in (DoNothingAgent, RepeatCheapAgent, SpamJobsAgent, DeployUnevaluatedAgent)}
