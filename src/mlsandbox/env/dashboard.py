"""The text dashboard of an episode (``render_mode="ansi"`` and ``mlsandbox watch``).

One :class:`Dashboard` snapshot, built either from a live gateway (:func:`from_gateway`, what the env's
``render()`` shows) or from an episode's audit log (:func:`from_audit`, what ``mlsandbox watch`` follows:
``<sandbox dir>/episodes/<episode>.jsonl``, one JSON record per step, written by every interface), and
rendered by :func:`render_dashboard` as a few lines of plain text: services, budget, last action,
jobs, registered models, alerts and the last reward components.

Alerts are what an on-call engineer would be paged for, derived from what is observable: a service that is
not running, a failed job, the last action's error, a budget nearly spent. Ground truth (injected faults)
is never shown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TERMINAL = {"succeeded", "failed", "cancelled"}


@dataclass
class Dashboard:
    scenario: str = "?"
    episode: str = "?"
    step: int = 0
    max_steps: int | None = None
    credits: float = 0.0
    credits_used: float = 0.0
    steps_left: int | None = None
    last_action: str | None = None
    last_ok: bool = True
    last_error: str | None = None
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    registered: list[tuple[str, str]] = field(default_factory=list)
    services: list[tuple[str, str]] = field(default_factory=list)
    reward_components: dict[str, float] = field(default_factory=dict)
    total_reward: float = 0.0
    invalid_actions: int = 0
    done: bool = False
    grade: dict[str, Any] | None = None

    @property
    def alerts(self) -> list[str]:
        out = [f"service {n} is {s}" for n, s in self.services if s != "running"]
        out += [
            f"{j} {d.get('state')}" for j, d in self.jobs.items() if d.get("state") in ("failed", "cancelled")
        ]
        if not self.last_ok and self.last_error:
            out.append(f"last action {self.last_action} failed: {self.last_error}")
        if self.credits and self.credits_used >= 0.8 * self.credits:
            out.append(f"budget {100 * self.credits_used / self.credits:.0f}% spent")
        return out


# ------------------------------------------------------------------------------------------ builders


def _note_result(d: Dashboard, action: str | None, result: Any) -> None:
    if not isinstance(result, dict):
        return
    if "job_id" in result and "state" in result:
        job = d.jobs.setdefault(str(result["job_id"]), {})
        job.update({k: result[k] for k in ("state", "algorithm", "dataset", "cpu_seconds") if k in result})
    for j in result.get("jobs") or []:
        if isinstance(j, dict) and "job_id" in j:
            d.jobs.setdefault(str(j["job_id"]), {})["state"] = j.get("state")
    if action == "register_model" and "version" in result:
        d.registered.append((str(result.get("name")), str(result.get("version"))))


def from_audit(records: list[dict[str, Any]], services: list[tuple[str, str]] | None = None) -> Dashboard:
    """A dashboard replayed from an episode's audit records (see the module docstring)."""
    d = Dashboard(services=list(services or []))
    for rec in records:
        d.episode = str(rec.get("episode", d.episode))
        event = rec.get("event")
        if event == "start":
            d.scenario = str(rec.get("scenario", d.scenario))
        elif event == "step":
            obs = rec.get("observation") or {}
            info = rec.get("info") or {}
            d.step = int(obs.get("step", d.step))
            budget = obs.get("budget") or {}
            d.credits = float(budget.get("credits", d.credits))
            d.credits_used = float(budget.get("credits_used", d.credits_used))
            d.steps_left = budget.get("steps_left", d.steps_left)
            d.last_action = obs.get("action")
            d.last_ok = bool(obs.get("ok"))
            err = obs.get("error") or {}
            d.last_error = f"{err.get('code')}: {err.get('message')}" if err else None
            if d.last_ok:
                _note_result(d, d.last_action, obs.get("result"))
            d.reward_components = dict(info.get("reward_components") or {})
            d.total_reward += float(rec.get("reward") or 0.0)
            d.invalid_actions = int(info.get("invalid_actions", d.invalid_actions))
            if info.get("grade") is not None:
                d.grade = info["grade"]
                d.done = True
        elif event == "close":
            d.done = True
    if d.steps_left is not None:
        d.max_steps = d.step + int(d.steps_left)
    return d


def from_gateway(
    gateway: Any, obs: dict[str, Any] | None, info: dict[str, Any], services: list[tuple[str, str]]
) -> Dashboard:
    """A dashboard of a live episode (``MLSandboxEnv.render``)."""
    st = gateway.state
    err = (obs or {}).get("error") or {}
    return Dashboard(
        scenario=st.scenario.id,
        episode=st.episode_id,
        step=st.step,
        max_steps=st.scenario.max_steps,
        credits=float(st.scenario.budget.credits),
        credits_used=float(st.credits_used),
        steps_left=max(0, st.scenario.max_steps - st.step),
        last_action=(obs or {}).get("action"),
        last_ok=bool((obs or {}).get("ok", True)),
        last_error=f"{err.get('code')}: {err.get('message')}" if err else None,
        jobs={
            j.job_id: {
                "state": j.state,
                "algorithm": j.algorithm,
                "dataset": j.dataset,
                "cpu_seconds": round(j.cpu_seconds, 3),
            }
            for j in st.jobs.values()
        },
        registered=[(n, str(v)) for n, v in st.registered],
        services=services,
        reward_components=dict(info.get("reward_components") or {}),
        invalid_actions=st.invalid_actions,
        done=st.done,
        grade=gateway.grade.as_dict() if getattr(gateway, "grade", None) is not None else None,
    )


# ------------------------------------------------------------------------------------------ rendering


def _clip(s: str, n: int = 100) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def render_dashboard(d: Dashboard) -> str:
    """The dashboard as plain text (printable ASCII and newlines), one item per line."""
    steps = f"{d.step}/{d.max_steps}" if d.max_steps is not None else str(d.step)
    state = "done" if d.done else "running"
    lines = [f"scenario {d.scenario}  episode {d.episode}  step {steps}  ({state})"]
    if d.services:
        lines.append("services  " + "  ".join(f"{n}:{s}" for n, s in d.services))
    lines.append(
        f"budget    credits {d.credits_used:.2f}/{d.credits:g}  steps left {d.steps_left}"
        f"  invalid actions {d.invalid_actions}"
    )
    if d.last_action is not None or d.step:
        outcome = "ok" if d.last_ok else f"ERROR {_clip(d.last_error or '', 80)}"
        lines.append(f"last      {d.last_action}: {outcome}")
    lines.append(f"jobs      {len(d.jobs)}" + ("" if d.jobs else " (none)"))
    for job_id, j in d.jobs.items():
        cpu = j.get("cpu_seconds")
        cpu_s = f"cpu {float(cpu):6.2f}s" if cpu is not None else ""
        lines.append(
            f"  {job_id:<8} {j.get('state')!s:<10} {j.get('algorithm') or ''!s:<20} {cpu_s}"
            f"  {j.get('dataset') or ''}".rstrip()
        )
    lines.append("models    " + (", ".join(f"{n} v{v}" for n, v in d.registered) or "(none registered)"))
    lines.append("alerts    " + ("; ".join(_clip(a, 80) for a in d.alerts) or "(none)"))
    if d.reward_components:
        comps = "  ".join(f"{k}={float(v):+.3f}" for k, v in d.reward_components.items())
        lines.append(f"reward    {comps}")
    if d.total_reward:
        lines.append(f"return    {d.total_reward:+.3f}")
    if d.grade is not None:
        lines.append("grade     " + "  ".join(f"{k}={v}" for k, v in d.grade.items()))
    text = "\n".join(lines) + "\n"
    return text.encode("ascii", "replace").decode()


# ------------------------------------------------------------------------------------------ audit files


def read_audit(path: Path) -> list[dict[str, Any]]:
    """The records of an audit log (a partly written last line is skipped)."""
    out = []
    with path.open() as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def latest_episode(episodes_dir: Path) -> Path | None:
    """The most recently written episode log in ``episodes_dir`` (None when there is none)."""
    files = list(episodes_dir.glob("*.jsonl")) if episodes_dir.is_dir() else []
    return max(files, key=lambda p: p.stat().st_mtime, default=None)


__all__ = ["Dashboard", "from_audit", "from_gateway", "latest_episode", "read_audit", "render_dashboard"]
