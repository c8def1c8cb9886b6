"""What an episode did in its workspace, read back from its steps (an action and the observation it got):
the files written (``write_file``, and the ``code`` of a ``run_python``), the scripts run as jobs, their
final state and the output the agent read (``get_logs``). ``replay`` and the console show it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_CONTENT_CHARS = 20_000
"""What a view keeps of a file's text or a script's output."""


@dataclass
class WrittenFile:
    path: str
    step: int
    bytes: int
    content: str
    truncated: bool = False


@dataclass
class ScriptRun:
    job_id: str
    script: str
    step: int
    state: str = "queued"
    cpu_seconds: float | None = None
    output: list[str] = field(default_factory=list)


@dataclass
class WorkspaceActivity:
    """Files by path (the last write wins) and script runs by job id, as the steps came."""

    files: dict[str, WrittenFile] = field(default_factory=dict)
    scripts: dict[str, ScriptRun] = field(default_factory=dict)

    def add(self, action: Any, observation: dict[str, Any]) -> list[str]:
        """Take one step in; the paths and job ids it touched."""
        if not isinstance(action, dict) or not observation.get("ok"):
            return []
        result = observation.get("result") or {}
        step = int(observation.get("step") or 0)
        kind = action.get("type")
        if kind == "write_file" and isinstance(action.get("content"), str):
            path = str(result.get("path") or action.get("path"))
            self.files[path] = _file(path, step, action["content"])
            return [path]
        if kind == "run_python" and "job_id" in result:
            job, script = str(result["job_id"]), str(result.get("script") or action.get("path"))
            touched = [job]
            if isinstance(action.get("code"), str):
                self.files[script] = _file(script, step, action["code"])
                touched.append(script)
            self.scripts[job] = ScriptRun(job, script, step, str(result.get("state") or "queued"))
            return touched
        named = result.get("job_id") if kind == "get_job" else action.get("target")
        run = self.scripts.get(str(named)) if named is not None else None
        if run is None:
            return []
        if kind == "get_job":
            run.state = str(result.get("state") or run.state)
            if isinstance(result.get("cpu_seconds"), (int, float)):
                run.cpu_seconds = float(result["cpu_seconds"])
        elif kind == "get_logs" and isinstance(result.get("lines"), list):
            lines = [str(x) for x in result["lines"]]
            run.output = lines[-200:]
        else:
            return []
        return [run.job_id]

    def as_dict(self) -> dict[str, Any]:
        return {
            "files": [vars(f) for f in sorted(self.files.values(), key=lambda f: f.path)],
            "scripts": [vars(r) | {"output": list(r.output)} for r in self.scripts.values()],
        }

    def summary_lines(self) -> list[str]:
        """A few lines of text: the files and the scripts (empty when the workspace was not used)."""
        out = []
        if self.files:
            out.append(
                "workspace files: "
                + ", ".join(
                    f"{f.path} ({f.bytes} B, step {f.step})"
                    for f in sorted(self.files.values(), key=lambda f: f.path)
                )
            )
        for r in self.scripts.values():
            cpu = f", cpu {r.cpu_seconds:.1f} s" if r.cpu_seconds is not None else ""
            out.append(f"script {r.job_id}: {r.script} (step {r.step}) {r.state}{cpu}")
        return out


def _file(path: str, step: int, content: str) -> WrittenFile:
    return WrittenFile(
        path=path,
        step=step,
        bytes=len(content.encode()),
        content=content[:MAX_CONTENT_CHARS],
        truncated=len(content) > MAX_CONTENT_CHARS,
    )
