"""Episode metrics from the state (hidden ground truth included): for ``info`` and benchmark rows only."""

from __future__ import annotations

from statistics import fmean
from typing import Any

from mlsandbox.evaluation.reward import agent_mitigated
from mlsandbox.world.episode import EpisodeState


def _mean(values: list[float]) -> float | None:
    return round(fmean(values), 3) if values else None


def fault_metrics(state: EpisodeState) -> dict[str, Any]:
    """Faults injected, detected and mitigated by the agent, with mean time to detect and to mitigate
    (in steps and seconds from the injection)."""
    recs = [r for r in state.ground_truth.faults if r.error is None]
    detected = [r for r in recs if r.detected_step is not None]
    mitigated = [r for r in recs if agent_mitigated(r)]
    return {
        "faults_injected": len(recs),
        "faults_detected": len(detected),
        "faults_mitigated": len(mitigated),
        "time_to_detect_steps": _mean([float(r.detected_step - r.injected_step) for r in detected]),
        "time_to_detect_s": _mean([r.time_to_detect_s for r in detected if r.time_to_detect_s is not None]),
        "time_to_mitigate_steps": _mean([float(r.mitigated_step - r.injected_step) for r in mitigated]),
        "time_to_mitigate_s": _mean(
            [r.time_to_mitigate_s for r in mitigated if r.time_to_mitigate_s is not None]
        ),
    }


def fault_windows(state: EpisodeState) -> list[dict[str, Any]]:
    """Each injected fault's window in steps (injected, detected, mitigated by the agent, recovered), for
    the report's timelines; a fault that could not be injected has no window."""
    return [
        {
            "name": r.name,
            "fault": r.fault,
            "target": r.target,
            "injected_step": r.injected_step,
            "detected_step": r.detected_step,
            "mitigated_step": r.mitigated_step if agent_mitigated(r) else None,
            "recovered_step": r.recovered_step,
            "recovered_by": r.recovered_by,
        }
        for r in state.ground_truth.faults
        if r.error is None
    ]


def episode_metrics(state: EpisodeState) -> dict[str, Any]:
    """What a benchmark row records about an episode besides its reward."""
    return {
        "fault_windows": fault_windows(state),
        "steps": state.step,
        "credits_used": round(state.credits_used, 4),
        "cpu_seconds": round(state.cpu_seconds, 3),
        "invalid_actions": state.invalid_actions,
        "jobs": len(state.jobs),
        "counters": {k: round(v, 4) for k, v in sorted(state.tallies().items())},
        **fault_metrics(state),
    }
