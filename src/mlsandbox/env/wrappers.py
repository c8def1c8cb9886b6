"""RL wrappers: the structured action space as ``Discrete`` with action masks, observations as a ``Box``.

:class:`DiscreteActions` numbers a fixed list of concrete actions ("slots") built from a curated template
per action type; :meth:`DiscreteActions.action_masks` says which slots are valid in the current state
(the method name Stable-Baselines3-contrib's ``MaskablePPO`` looks for; the mask is also in
``info["action_mask"]``). A slot is unmasked only if its action validates against the action models and
the gateway would carry it out given the episode state:

=====================  ==========================================  =========================================
action type            slots                                       unmasked when
=====================  ==========================================  =========================================
``list_datasets``      1                                           always
``check_data_quality`` one per dataset slot                        the dataset exists
``clean_dataset``      dataset slot x strategy (default output)    the dataset exists
``train_model``        dataset slot x algorithm (default params;   the dataset exists, has a target, credits
                       ``algorithms=`` narrows the list)
``get_job``            one per job slot (``job-1`` ...)            the job exists
``list_runs``          1                                           always
``register_model``     one per job slot (goal's model name)        the job succeeded with a tracking run
``wait``               one per ``wait_seconds`` value              always
``get_logs``           service x 1, job slot x 1                   the backend exposes services / job exists
``get_service_health`` one per service                             the backend exposes services
``restart_service``    one per service                             ``allow_restart=True`` (slow; shared)
``retry_job``          one per job slot                            the job finished, credits left
``submit``             1                                           always
=====================  ==========================================  =========================================

Dataset slots follow the episode's datasets in creation order (the scenario's first, then cleaned
outputs); job slots are ``job-1`` ... ``job-<max_jobs>``.

``set_job_resources`` and every action of a pack without a curated template (plug-in packs, packs added
later) get one slot each that is *always masked*: whether such an action is valid cannot be decided from
the state (``set_job_resources`` races with its job finishing), so the encoding never offers it. Give
``templates={type: Template(...)}`` to encode them. Actions the scenario's hard constraints forbid are masked too.
Backend failures caused by a fault plan (a service
down) are not predicted: on a fault-free scenario an unmasked action is never rejected.

Choosing a masked slot sends nothing to the sandbox: the step goes to the gateway as an unknown action
(``{"type": "masked_action"}``), which earns the usual invalid-action penalty and changes nothing.

:class:`FlatObservation` turns the episode state into a ``Box`` of floats in [0, 1] (progress, budget,
last action and its outcome, dataset and job slots, registrations). Both wrappers need the in-process
env (:class:`~mlsandbox.env.gym_env.MLSandboxEnv`): the state they read is not sent over HTTP.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, get_args

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from mlsandbox.errors import ActionError
from mlsandbox.gateway.dispatcher import Gateway, parse_action
from mlsandbox.gateway.packs.core.actions import CleanDataset, ServiceName, TrainModel
from mlsandbox.gateway.registry import get_catalog
from mlsandbox.world.episode import EpisodeState

MASKED_ACTION = {"type": "masked_action"}
"""What the gateway receives when a masked slot is chosen (an unknown action: penalty, no change)."""

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
SERVICES: tuple[str, ...] = get_args(ServiceName)
STRATEGIES: tuple[str, ...] = get_args(CleanDataset.model_fields["strategy"].annotation)
ALGORITHMS: tuple[str, ...] = get_args(TrainModel.model_fields["algorithm"].annotation)


@dataclass(frozen=True)
class SlotContext:
    """What a template reads to build its slots: the episode and the wrapper's options."""

    gateway: Gateway
    max_datasets: int
    max_jobs: int
    wait_seconds: tuple[float, ...]
    allow_restart: bool
    algorithms: tuple[str, ...] = ALGORITHMS

    @property
    def state(self) -> EpisodeState:
        return self.gateway.state

    def dataset(self, i: int) -> str | None:
        keys = list(self.state.datasets)
        return keys[i] if i < len(keys) else None

    def job_id(self, j: int) -> str:
        return f"job-{j + 1}"

    @property
    def has_services(self) -> bool:
        return self.gateway.runtime.support().reason("faults.services") is None


Slot = tuple[dict[str, Any], bool]
"""A concrete action and whether it is valid now."""


@dataclass(frozen=True)
class Template:
    """The slots of one action type: ``count(options)`` of them, the i-th built by ``build(ctx, i)``."""

    count: Callable[[SlotContext], int]
    build: Callable[[SlotContext, int], Slot]


def _one(action: dict[str, Any], valid: Callable[[SlotContext], bool] = lambda _: True) -> Template:
    return Template(lambda _: 1, lambda ctx, _: (action, valid(ctx)))


def _dataset_slot(ctx: SlotContext, i: int) -> tuple[str, bool]:
    name = ctx.dataset(i)
    return (name or f"none/slot-{i}.csv"), name is not None


def _check(ctx: SlotContext, i: int) -> Slot:
    name, ok = _dataset_slot(ctx, i)
    return {"type": "check_data_quality", "dataset": name}, ok


def _clean(ctx: SlotContext, i: int) -> Slot:
    d, s = divmod(i, len(STRATEGIES))
    name, ok = _dataset_slot(ctx, d)
    return {"type": "clean_dataset", "dataset": name, "strategy": STRATEGIES[s]}, ok


def _train(ctx: SlotContext, i: int) -> Slot:
    d, a = divmod(i, len(ctx.algorithms))
    name, ok = _dataset_slot(ctx, d)
    rec = ctx.state.datasets.get(name)
    ok = ok and rec is not None and rec.target is not None and ctx.state.credits_left > 0
    return {"type": "train_model", "dataset": name, "algorithm": ctx.algorithms[a]}, ok


def _job(ctx: SlotContext, j: int) -> Any:
    return ctx.state.jobs.get(ctx.job_id(j))


def _get_job(ctx: SlotContext, j: int) -> Slot:
    return {"type": "get_job", "job_id": ctx.job_id(j)}, _job(ctx, j) is not None


def _register(ctx: SlotContext, j: int) -> Slot:
    job = _job(ctx, j)
    run_id = job.run_id if job is not None else None
    ok = job is not None and job.state == "succeeded" and run_id is not None
    name = ctx.state.scenario.goal.model_name
    return {"type": "register_model", "run_id": run_id or "0" * 32, "name": name}, ok


def _retry(ctx: SlotContext, j: int) -> Slot:
    job = _job(ctx, j)
    ok = (
        job is not None
        and job.state in TERMINAL
        and job.dataset in ctx.state.datasets
        and ctx.state.credits_left > 0
    )
    return {"type": "retry_job", "job_id": ctx.job_id(j)}, ok


def _wait(ctx: SlotContext, i: int) -> Slot:
    return {"type": "wait", "seconds": ctx.wait_seconds[i]}, True


def _logs(ctx: SlotContext, i: int) -> Slot:
    if i < len(SERVICES):
        return {"type": "get_logs", "target": SERVICES[i], "tail": 20}, ctx.has_services
    j = i - len(SERVICES)
    return {"type": "get_logs", "target": ctx.job_id(j), "tail": 20}, _job(ctx, j) is not None


def _health(ctx: SlotContext, i: int) -> Slot:
    return {"type": "get_service_health", "service": SERVICES[i]}, ctx.has_services


def _restart(ctx: SlotContext, i: int) -> Slot:
    return {"type": "restart_service", "service": SERVICES[i]}, ctx.has_services and ctx.allow_restart


TEMPLATES: dict[str, Template] = {
    "list_datasets": _one({"type": "list_datasets"}),
    "check_data_quality": Template(lambda c: c.max_datasets, _check),
    "clean_dataset": Template(lambda c: c.max_datasets * len(STRATEGIES), _clean),
    "train_model": Template(lambda c: c.max_datasets * len(c.algorithms), _train),
    "get_job": Template(lambda c: c.max_jobs, _get_job),
    "list_runs": _one({"type": "list_runs"}),
    "register_model": Template(lambda c: c.max_jobs, _register),
    "wait": Template(lambda c: len(c.wait_seconds), _wait),
    "get_logs": Template(lambda c: len(SERVICES) + c.max_jobs, _logs),
    "get_service_health": Template(lambda _: len(SERVICES), _health),
    "restart_service": Template(lambda _: len(SERVICES), _restart),
    "retry_job": Template(lambda c: c.max_jobs, _retry),
    "submit": _one({"type": "submit"}),
}
"""The curated templates. Action types without one get a single always-masked slot."""


def _masked_fallback(action_type: str) -> Template:
    return _one({"type": action_type}, lambda _: False)


def _gateway_of(env: gym.Env[Any, Any]) -> Gateway:
    inner = env.unwrapped
    if not hasattr(inner, "gateway"):
        raise TypeError(
            f"{type(inner).__name__} does not expose its episode state: the RL wrappers need the in-process "
            "MLSandboxEnv (mlsandbox/MLSandbox-v0)"
        )
    gw = inner.gateway
    if gw is None:
        raise gym.error.ResetNeeded("call reset() first")
    return gw


class DiscreteActions(gym.Wrapper[Any, np.int64, Any, Any]):
    """Actions as ``Discrete(n)`` slots with a validity mask; see the module docstring."""

    def __init__(
        self,
        env: gym.Env[Any, Any],
        *,
        action_types: Sequence[str] | None = None,
        max_datasets: int = 6,
        max_jobs: int = 4,
        wait_seconds: Sequence[float] = (5.0,),
        allow_restart: bool = False,
        templates: dict[str, Template] | None = None,
        algorithms: Sequence[str] | None = None,
    ) -> None:
        super().__init__(env)
        algos = tuple(ALGORITHMS if algorithms is None else algorithms)
        if not algos or any(a not in ALGORITHMS for a in algos):
            raise ValueError(
                f"algorithms must be a non-empty subset of {list(ALGORITHMS)}, got {list(algos)}"
            )
        catalog = get_catalog().types
        types = list(catalog if action_types is None else action_types)
        unknown = [t for t in types if t not in catalog]
        if unknown:
            raise ValueError(f"unknown action types {unknown}; the catalog has {list(catalog)}")
        if not types:
            raise ValueError("action_types is empty")
        self._probe = SlotContext(
            None,  # type: ignore[arg-type]  # counting slots needs the options only
            max_datasets=max_datasets,
            max_jobs=max_jobs,
            wait_seconds=tuple(float(s) for s in wait_seconds),
            allow_restart=allow_restart,
            algorithms=algos,
        )
        table = {**TEMPLATES, **(templates or {})}
        self.templates: list[tuple[str, Template]] = [(t, table.get(t) or _masked_fallback(t)) for t in types]
        self.curated = frozenset(t for t in types if t in table)
        self.slot_types: list[str] = []
        self._index: list[tuple[Template, int]] = []
        for t, tpl in self.templates:
            for i in range(tpl.count(self._probe)):
                self.slot_types.append(t)
                self._index.append((tpl, i))
        self.action_space = spaces.Discrete(len(self._index))

    # ----------------------------------------------------------------------------------------- slots

    def slots(self) -> list[Slot]:
        """Every slot's concrete action and validity in the current state."""
        ctx = dataclasses.replace(self._probe, gateway=_gateway_of(self.env))
        out: list[Slot] = []
        for tpl, i in self._index:
            action, ok = tpl.build(ctx, i)
            if ok and ctx.state.done:
                ok = False
            if ok:
                try:
                    validated = parse_action(action).model_dump(mode="json")
                except ActionError:
                    ok = False
                else:  # the scenario's hard constraints forbid it (it would end the episode)
                    ok = not _violates(ctx.state.scenario, validated)
            out.append((action, ok))
        return out

    def action_masks(self) -> np.ndarray:
        """A boolean array: True where the slot's action is valid now."""
        return np.array([ok for _, ok in self.slots()], dtype=bool)

    def action(self, index: int) -> dict[str, Any]:
        """The concrete action of a slot (valid or not)."""
        return self.slots()[int(index)][0]

    def describe(self) -> list[str]:
        """A readable name per slot (for logs and tests)."""
        return [f"{i}:{a['type']}({_args(a)})" for i, (a, _) in enumerate(self.slots())]

    # ------------------------------------------------------------------------------------------- API

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        info["action_mask"] = self.action_masks()
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        index = int(action)
        n = len(self._index)
        if not 0 <= index < n:
            raise ValueError(f"action {index} is outside Discrete({n})")
        chosen, ok = self.slots()[index]
        inner: gym.Env[Any, Any] = self.env
        obs, reward, terminated, truncated, info = inner.step(chosen if ok else MASKED_ACTION)
        info["slot"] = index
        info["masked_choice"] = not ok
        info["action_mask"] = self.action_masks()
        return obs, float(reward), terminated, truncated, info


def _violates(scenario: Any, action: dict[str, Any]) -> bool:
    try:
        from mlsandbox.evaluation.constraints import check_action
    except ImportError:  # a tree without hard constraints
        return False
    return check_action(scenario, action) is not None


def _args(action: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in action.items() if k != "type")


class FlatObservation(gym.ObservationWrapper[np.ndarray, Any, Any]):
    """The episode state as a ``Box`` of float32 in [0, 1]; see the module docstring."""

    JOB_STATES = ("queued", "running", "succeeded", "failed", "cancelled")

    def __init__(self, env: gym.Env[Any, Any], *, max_datasets: int = 6, max_jobs: int = 4) -> None:
        super().__init__(env)
        self.max_datasets = max_datasets
        self.max_jobs = max_jobs
        self.types = list(get_catalog().types)
        n = 6 + len(self.types) + 3 * max_datasets + (len(self.JOB_STATES) + 2) * max_jobs
        self.observation_space = spaces.Box(0.0, 1.0, shape=(n,), dtype=np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        gw = _gateway_of(self.env)
        st = gw.state
        sc = st.scenario
        obs = self.env.unwrapped._last or {}  # type: ignore[attr-defined]
        f: list[float] = [
            min(1.0, st.step / max(1, sc.max_steps)),
            st.credits_left / sc.budget.credits if sc.budget.credits else 0.0,
            float(bool(obs.get("ok", True))),
            float(st.submitted),
            min(1.0, len(st.registered) / 3),
            float(any(n == sc.goal.model_name for n, _ in st.registered)),
        ]
        last = obs.get("action")
        f += [float(last == t) for t in self.types]
        keys = list(st.datasets)
        for i in range(self.max_datasets):
            rec = st.datasets.get(keys[i]) if i < len(keys) else None
            f += [
                float(rec is not None),
                float(rec is not None and rec.origin != "scenario"),
                float(rec is not None and rec.target is not None),
            ]
        for j in range(self.max_jobs):
            job = st.jobs.get(f"job-{j + 1}")
            f += [float(job is not None and job.state == s) for s in self.JOB_STATES]
            f += [float(job is not None), float(job is not None and job.run_id is not None)]
        return np.clip(np.asarray(f, dtype=np.float32), 0.0, 1.0)


def make_rl_env(
    scenario: Any = "tabular-quality-basic",
    *,
    action_types: Sequence[str] | None = None,
    max_datasets: int = 6,
    max_jobs: int = 4,
    wait_seconds: Sequence[float] = (5.0,),
    allow_restart: bool = False,
    algorithms: Sequence[str] | None = None,
    templates: dict[str, Template] | None = None,
    **env_kwargs: Any,
) -> gym.Env[np.ndarray, np.int64]:
    """``MLSandboxEnv`` with :class:`FlatObservation` and :class:`DiscreteActions` (masks via ``action_masks``)."""
    from mlsandbox.env.gym_env import MLSandboxEnv

    env: gym.Env[Any, Any] = MLSandboxEnv(scenario, **env_kwargs)
    env = FlatObservation(env, max_datasets=max_datasets, max_jobs=max_jobs)
    return DiscreteActions(
        env,
        action_types=action_types,
        max_datasets=max_datasets,
        max_jobs=max_jobs,
        wait_seconds=wait_seconds,
        allow_restart=allow_restart,
        algorithms=algorithms,
        templates=templates,
    )


__all__ = [
    "MASKED_ACTION",
    "TEMPLATES",
    "DiscreteActions",
    "FlatObservation",
    "SlotContext",
    "Template",
    "make_rl_env",
]
