"""The reference solution of the built-in data-source scenarios (``sources`` action pack).

list the sources -> for a lake source: wait for the scheduled batches, repair renamed columns found by
schema_diff, keep the batches that do not drift against the newest one (drift_check) and ingest them;
otherwise ingest the API or PostgreSQL source (re-reading credentials after a 401, waiting out an
outage) -> inspect and clean -> train -> register -> submit.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from mlsandbox.agents.scripted import Obs, ReferenceAgent, Script, cleaning_plan, deliverable

MAX_WAIT_STEPS = 8


class SourcesReferenceAgent(ReferenceAgent):
    name = "sources-reference"

    def script(self, first: Obs) -> Script:
        model, _ = deliverable(first)
        obs = yield {"type": "list_sources"}
        sources = (obs.get("result") or {}).get("sources") or []
        if not sources:
            return
        lakes = [s for s in sources if s["kind"] == "lake"]
        if lakes:
            dataset = yield from self.from_lake(lakes[0])
        else:
            dataset = yield from self.ingest({"type": "ingest_source", "source": sources[0]["name"]})
        if dataset is None:
            return
        obs = yield from self.do({"type": "check_data_quality", "dataset": dataset})
        if obs.get("ok"):
            for strategy in cleaning_plan((obs.get("result") or {}).get("profile") or {}):
                obs = yield from self.do({"type": "clean_dataset", "dataset": dataset, "strategy": strategy})
                if obs.get("ok"):
                    dataset = obs["result"]["dataset"]
        run_id = yield from self.train(dataset)
        if run_id is not None:
            yield from self.do({"type": "register_model", "run_id": run_id, "name": model})

    def from_lake(self, lake: dict[str, Any]) -> Generator[dict[str, Any], Obs, str | None]:
        for _ in range(MAX_WAIT_STEPS):
            if len(lake["arrived"]) >= len(lake["schedule"]):
                break
            yield {"type": "wait", "seconds": 1}
            obs = yield {"type": "list_sources"}
            lake = next(s for s in (obs.get("result") or {}).get("sources", []) if s["name"] == lake["name"])
        keys = [a["dataset"] for a in lake["arrived"]]
        if not keys:
            return None
        renames: dict[str, str] = {}
        for key in keys[1:]:
            obs = yield {"type": "schema_diff", "reference": keys[0], "current": key}
            for pair in (obs.get("result") or {}).get("likely_renames", []):
                renames[pair["to"]] = pair["from"]
        keep = []
        for arrived in lake["arrived"]:
            if arrived["dataset"] != keys[-1]:
                obs = yield {"type": "drift_check", "reference": arrived["dataset"], "current": keys[-1]}
                if not obs.get("ok") or (obs.get("result") or {}).get("drifted_columns"):
                    continue
            keep.append(arrived["batch"])
        action = {"type": "ingest_source", "source": lake["name"], "batches": keep, "rename": renames}
        return (yield from self.ingest(action))

    def await_job(self, job_id: str) -> Generator[dict[str, Any], Obs, Obs]:
        """Long waits (a wait returns as soon as a job finishes): few steps spent on a busy machine."""
        obs: Obs = {}
        for _ in range(20):
            yield {"type": "wait", "seconds": 60}
            obs = yield {"type": "get_job", "job_id": job_id}
            if obs.get("ok") and (obs.get("result") or {}).get("state") in (
                "succeeded",
                "failed",
                "cancelled",
            ):
                return obs
        return obs

    def ingest(self, action: dict[str, Any]) -> Generator[dict[str, Any], Obs, str | None]:
        """Ingest, re-reading the credentials after an auth failure and waiting out an outage."""
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
