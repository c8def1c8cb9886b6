"""The reference solution of the built-in pipeline scenario (``flows`` action pack).

list the flow runs -> for each failed ingestion run read its state and logs:

* a schema check that failed on a renamed column: find the rename (``schema_diff`` of the upstream batch
  against a lake batch; else the missing and unexpected columns named in the log, paired in order) and run
  the ingestion again with ``rename``;
* a missing upstream object: wait until the batch is delivered, then retry the run;

-> wait until every recovered run completed -> run the training pipeline -> wait for it -> give the new
model version the ``production`` alias -> submit. Models are trained and registered only by the pipeline.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Generator
from typing import Any

from mlsandbox.agents.scripted import Obs, Script, ScriptedAgent, deliverable

TERMINAL = ("Completed", "Failed", "Crashed", "Cancelled")
MAX_POLLS = 12
"""Looks at one flow run before giving up on it (each after a wait)."""
POLL_WAIT_S = 15
MAX_DELIVERY_WAITS = 6

_SCHEMA = re.compile(r"missing required column\(s\) (\[[^\]]*\]); unexpected column\(s\) (\[[^\]]*\])")

Gen = Generator[dict[str, Any], Obs, Any]


def _result(obs: Obs) -> dict[str, Any]:
    return (obs.get("result") or {}) if obs.get("ok") else {}


def _columns(text: str) -> list[str]:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return []
    return [str(c) for c in value] if isinstance(value, list) else []


class PipelineReferenceAgent(ScriptedAgent):
    name = "pipeline-reference"

    def script(self, first: Obs) -> Script:
        model, _ = deliverable(first)
        runs = _result((yield {"type": "list_flows"})).get("runs", [])
        pending: list[str] = []
        dataset: str | None = None
        for row in runs:
            if row.get("flow") != "ingestion":
                continue
            run = yield from self.finished(row["flow_run_id"])
            params = row.get("parameters") or {}
            dataset = dataset or params.get("dataset")
            if run.get("state") == "Completed":
                continue
            recovered = yield from self.recover(row["flow_run_id"], params, run)
            if recovered:
                pending.append(recovered)
        for fr in pending:
            yield from self.finished(fr)
        if dataset is None:
            return
        started = _result(
            (
                yield {
                    "type": "run_flow",
                    "name": "training",
                    "parameters": {"dataset": dataset, "model_name": model},
                }
            )
        )
        if not started:
            return
        trained = yield from self.finished(started["flow_run_id"], polls=2 * MAX_POLLS)
        if trained.get("state") != "Completed":
            return
        versions = _result((yield {"type": "get_model_versions", "name": model})).get("versions", [])
        if versions:
            latest = max(int(v["version"]) for v in versions)
            yield {"type": "set_model_alias", "name": model, "version": latest, "alias": "production"}

    def finished(self, flow_run_id: str, polls: int = MAX_POLLS) -> Gen:
        """The flow run once it is in a final state (or its last look); logs included."""
        run: dict[str, Any] = {}
        for i in range(polls):
            if i:
                yield {"type": "wait", "seconds": POLL_WAIT_S}
            run = _result((yield {"type": "get_flow_run", "flow_run_id": flow_run_id, "log_lines": 200}))
            if run.get("state") in TERMINAL:
                return run
        return run

    def recover(self, flow_run_id: str, params: dict[str, Any], run: dict[str, Any]) -> Gen:
        """Fix what made a failed ingestion run fail; the id of the run to wait for, or None."""
        text = "\n".join([str(run.get("message") or ""), *map(str, run.get("logs") or [])])
        dataset, batch = params.get("dataset"), params.get("batch")
        upstream = f"upstream/{dataset}/{batch}.csv"
        schema = _SCHEMA.search(text)
        if schema:
            rename = yield from self.find_rename(dataset, upstream, schema)
            if not rename:
                return None
            obs = yield {
                "type": "run_flow",
                "name": "ingestion",
                "parameters": {**params, "rename": rename},
            }
            return _result(obs).get("flow_run_id")
        if "NoSuchKey" in text or "is missing" in text:
            for i in range(MAX_DELIVERY_WAITS):
                names = {d["name"] for d in _result((yield {"type": "list_datasets"})).get("datasets", [])}
                if upstream in names:
                    break
                yield {"type": "wait", "seconds": 5 * (i + 1)}
            else:
                return None
        obs = yield {"type": "retry_flow_run", "flow_run_id": flow_run_id}
        return flow_run_id if obs.get("ok") else None

    def find_rename(self, dataset: Any, upstream: str, schema: re.Match[str]) -> Gen:
        """old -> new column names for an upstream batch whose columns were renamed."""
        missing, unexpected = _columns(schema.group(1)), _columns(schema.group(2))
        names = [d["name"] for d in _result((yield {"type": "list_datasets"})).get("datasets", [])]
        lake = sorted(n for n in names if n.startswith(f"lake/{dataset}/"))
        if lake:
            obs = yield {"type": "schema_diff", "reference": lake[-1], "current": upstream}
            pairs = _result(obs).get("likely_renames") or []
            found = {p["to"]: p["from"] for p in pairs if p.get("from") in missing}
            if found:
                return found
        if len(missing) == len(unexpected):
            return dict(zip(unexpected, missing, strict=True))
        return {}
