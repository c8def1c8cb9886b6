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
``train_model``        dataset slot x algorithm x machine          the dataset exists, has a target, credits
                       (default params; ``algorithms=`` narrows    left, the machine is in the scenario's
                       the list; ``machines=`` names machine       catalog
                       types, default: none, the action's own
                       resources)
``get_job``            one per job slot (``job-1`` ...)            the job exists
``list_runs``          1                                           always
``register_model``     one per job slot (goal's model name)        the job succeeded with a tracking run
``ingest_source``      one per source slot (the scenario's         the source exists, the backend has
                       sources in order; default output)           sources, its output is not in the lake
``deploy_model``       one per ``replicas`` value (the goal's      a version of the goal's model is
                       model's latest version, default machine)    registered and not served yet, the
                                                                   scenario has serving, the backend serves
``wait``               one per ``wait_seconds`` value              always
``get_logs``           service x 1, job slot x 1                   the backend exposes services / job exists
``get_service_health`` one per service (``services=`` narrows)     the backend exposes services
``restart_service``    one per service (``services=`` narrows)     ``allow_restart=True`` (slow; shared)
``retry_job``          one per job slot                            the job finished, credits left
``submit``             1                                           always
=====================  ==========================================  =========================================

The algorithm of a ``train_model`` slot is a *position* in the dataset kind's RL slot templates
(``TaskKind.train_slots()``: an algorithm with fixed hyperparameters per position, declared by the kind,
by default its algorithms in order), named by the binary kind's algorithm at that position
(``logistic_regression`` is position 0: a regression's ``ridge``; the image kind's position 2 is its
pixel-feature model with the classes weighted). The ``clean_dataset`` strategies are positions in the
kind's ``preparation_slots()`` likewise. The action space has the same shape for every kind, and a
position a kind does not fill is masked. The kind is the goal dataset's; it is in ``info["kind"]``, and
``FlatObservation(kind_features=True)`` adds it to the observation (one-hot over the installed kinds; off
by default, which keeps the observation's shape).

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

:class:`FlatObservation` turns the episode state into a ``Box`` of floats in [0, 1] (progress, budget
and, with ``time_features=True``, the shares of the deadline's seconds and of the compute window's credits
left; last action and its outcome, dataset and job slots, registrations), followed by what the agent has
*learnt from its observations* so far in the episode (:class:`Memory`): per dataset slot whether it was
profiled, whether that profile showed missing values or outliers (and the largest missing rate), and
which cleaning strategies made it; per job slot its algorithm, the lineage of the data it trained on,
whether its run was registered under the goal's name and how it ended (out of memory, other failure);
per service the last health probe (healthy, unhealthy) and a restart; the last error code; per source
slot (``max_sources``) whether the scenario declares it and whether it was ingested; whether the goal's
model was deployed. Nothing
hidden (ground truth, the defect manifest, fault records) goes in: every feature comes from the episode
state the gateway keeps or from an observation the agent received, so it is the same on every backend.
Both wrappers need the in-process env (:class:`~mlsandbox.env.gym_env.MLSandboxEnv`): the state they
read is not sent over HTTP. They read it through the env's public accessors (``episode``,
``last_observation``, ``supports``), found with :func:`in_process_env`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, SupportsFloat, get_args

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from mlsandbox.env.gym_env import MLSandboxEnv
from mlsandbox.errors import ActionError
from mlsandbox.gateway.dispatcher import parse_action
from mlsandbox.gateway.packs.core.actions import ServiceName, TrainModel
from mlsandbox.gateway.packs.sources.actions import default_output
from mlsandbox.gateway.registry import get_catalog
from mlsandbox.tasks.kind import TaskKind, TrainSlot
from mlsandbox.tasks.registry import kind_of, kinds
from mlsandbox.workloads.trainer import ESTIMATOR_PARAMETERS
from mlsandbox.world.episode import EpisodeState

MASKED_ACTION = {"type": "masked_action"}
"""What the gateway receives when a masked slot is chosen (an unknown action: penalty, no change)."""

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
SLOT_LISTS_KEPT = 512
"""Slot lists a :class:`DiscreteActions` remembers by content (see :meth:`DiscreteActions.slots`)."""
SERVICES: tuple[str, ...] = get_args(ServiceName)
STRATEGIES: tuple[str, ...] = tuple(TaskKind.preparations)
"""The table kinds' cleaning strategies: the ``clean_dataset`` slots' positions (another kind's slots map
position by position to its own strategies, the positions it lacks masked; see ``CleanDataset.strategy``
for all)."""
ALGORITHMS: tuple[str, ...] = tuple(ESTIMATOR_PARAMETERS)
"""The classifiers' algorithms (the RL action space's; see ``TrainModel.algorithm`` for all)."""


@dataclass(frozen=True)
class SlotContext:
    """What a template reads to build its slots: the episode's state and the wrapper's options."""

    state: EpisodeState
    max_datasets: int
    max_jobs: int
    wait_seconds: tuple[float, ...]
    allow_restart: bool
    algorithms: tuple[str, ...] = ALGORITHMS
    kind_train_slots: tuple[TrainSlot, ...] = tuple(TrainSlot(a) for a in ALGORITHMS)
    kind_preparations: tuple[str, ...] = STRATEGIES
    """The episode's kind's RL slot templates, by position (see the module docstring)."""
    machines: tuple[str | None, ...] = (None,)
    """Machine types of the ``train_model`` slots (None: no machine, the action's default resources)."""
    services: tuple[str, ...] = SERVICES
    """Services of the health, restart and service-log slots."""
    has_services: bool = False
    """The episode's backend exposes its services (health, logs, restarts: ``faults.services``)."""
    dataset_names: tuple[str, ...] | None = None
    """The episode's datasets in order, read once per state (None: read from ``state`` each time)."""
    has_credits: bool | None = None
    """Whether credits are left, read once per state (None: read from ``state`` each time)."""
    max_sources: int = 2
    """Source slots of ``ingest_source``: the scenario's sources, in the order it declares them."""
    replicas: tuple[int, ...] = (1, 2)
    """Replica counts of the ``deploy_model`` slots."""
    has_sources: bool = False
    """The episode's backend has external sources (``sources``)."""
    has_serving: bool = False
    """The episode's backend serves models (``serving``)."""

    def dataset(self, i: int) -> str | None:
        keys = self.dataset_names if self.dataset_names is not None else tuple(self.state.datasets)
        return keys[i] if i < len(keys) else None

    def credits(self) -> bool:
        return self.has_credits if self.has_credits is not None else self.state.credits_left > 0

    def job_id(self, j: int) -> str:
        return f"job-{j + 1}"


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
    ok = ok and s < len(ctx.kind_preparations)
    strategy = ctx.kind_preparations[s] if s < len(ctx.kind_preparations) else STRATEGIES[s]
    return {"type": "clean_dataset", "dataset": name, "strategy": strategy}, ok


def _train(ctx: SlotContext, i: int) -> Slot:
    d, rest = divmod(i, len(ctx.algorithms) * len(ctx.machines))
    a, m = divmod(rest, len(ctx.machines))
    name, ok = _dataset_slot(ctx, d)
    rec = ctx.state.datasets.get(name)
    ok = ok and rec is not None and rec.target is not None and ctx.credits()
    position = ALGORITHMS.index(ctx.algorithms[a])
    ok = ok and position < len(ctx.kind_train_slots)
    slot = (
        ctx.kind_train_slots[position]
        if position < len(ctx.kind_train_slots)
        else TrainSlot(ctx.algorithms[a])
    )
    action: dict[str, Any] = {"type": "train_model", "dataset": name, **slot.action()}
    machine = ctx.machines[m]
    if machine is not None:
        action["machine"] = machine
        ok = ok and machine in {mt.name for mt in ctx.state.scenario.compute.machines}
    return action, ok


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
    ok = job is not None and job.state in TERMINAL and job.dataset in ctx.state.datasets and ctx.credits()
    return {"type": "retry_job", "job_id": ctx.job_id(j)}, ok


def _ingest(ctx: SlotContext, i: int) -> Slot:
    sources = ctx.state.scenario.sources
    if i >= len(sources):
        return {"type": "ingest_source", "source": f"none-{i}"}, False
    name = sources[i].name
    ok = ctx.has_sources and default_output(name) not in ctx.state.datasets
    return {"type": "ingest_source", "source": name}, ok


def _deploy(ctx: SlotContext, i: int) -> Slot:
    sc = ctx.state.scenario
    name = sc.goal.model_name
    versions = [v for n, v in ctx.state.registered if n == name]
    version = versions[-1] if versions else "1"
    replicas = ctx.replicas[i]
    ok = (
        bool(versions)
        and ctx.has_serving
        and sc.serving is not None
        and replicas <= sc.serving.max_replicas
        and ctx.state.serving.served_version != version
    )
    return {"type": "deploy_model", "name": name, "version": version, "replicas": replicas}, ok


def _wait(ctx: SlotContext, i: int) -> Slot:
    return {"type": "wait", "seconds": ctx.wait_seconds[i]}, True


def _logs(ctx: SlotContext, i: int) -> Slot:
    if i < len(ctx.services):
        return {"type": "get_logs", "target": ctx.services[i], "tail": 20}, ctx.has_services
    j = i - len(ctx.services)
    return {"type": "get_logs", "target": ctx.job_id(j), "tail": 20}, _job(ctx, j) is not None


def _health(ctx: SlotContext, i: int) -> Slot:
    return {"type": "get_service_health", "service": ctx.services[i]}, ctx.has_services


def _restart(ctx: SlotContext, i: int) -> Slot:
    return {"type": "restart_service", "service": ctx.services[i]}, ctx.has_services and ctx.allow_restart


TEMPLATES: dict[str, Template] = {
    "list_datasets": _one({"type": "list_datasets"}),
    "check_data_quality": Template(lambda c: c.max_datasets, _check),
    "clean_dataset": Template(lambda c: c.max_datasets * len(STRATEGIES), _clean),
    "train_model": Template(lambda c: c.max_datasets * len(c.algorithms) * len(c.machines), _train),
    "get_job": Template(lambda c: c.max_jobs, _get_job),
    "list_runs": _one({"type": "list_runs"}),
    "register_model": Template(lambda c: c.max_jobs, _register),
    "ingest_source": Template(lambda c: c.max_sources, _ingest),
    "deploy_model": Template(lambda c: len(c.replicas), _deploy),
    "wait": Template(lambda c: len(c.wait_seconds), _wait),
    "get_logs": Template(lambda c: len(c.services) + c.max_jobs, _logs),
    "get_service_health": Template(lambda c: len(c.services), _health),
    "restart_service": Template(lambda c: len(c.services), _restart),
    "retry_job": Template(lambda c: c.max_jobs, _retry),
    "submit": _one({"type": "submit"}),
}
"""The curated templates. Action types without one get a single always-masked slot."""


def _masked_fallback(action_type: str) -> Template:
    return _one({"type": action_type}, lambda _: False)


def episode_kind(state: EpisodeState) -> TaskKind:
    """The kind of work of an episode: its goal dataset's."""
    sc = state.scenario
    return kind_of(sc.dataset(sc.goal.dataset))


def kind_train_slots(state: EpisodeState) -> tuple[TrainSlot, ...]:
    """What the episode's kind trains at each ``train_model`` position (its RL slot templates)."""
    return episode_kind(state).train_slots()


def kind_preparations(state: EpisodeState) -> tuple[str, ...]:
    """The episode's kind's cleaning strategies in their positions (what the ``clean_dataset`` slots map to)."""
    return episode_kind(state).preparation_slots()


def in_process_env(env: gym.Env[Any, Any]) -> MLSandboxEnv:
    """The in-process :class:`~mlsandbox.env.gym_env.MLSandboxEnv` under ``env``'s wrappers (the env whose
    episode state the RL wrappers read); ``TypeError`` for any other env."""
    inner = env.unwrapped
    if not isinstance(inner, MLSandboxEnv):
        raise TypeError(
            f"{type(inner).__name__} does not expose its episode state: the RL wrappers need the in-process "
            "MLSandboxEnv (mlsandbox/MLSandbox-v0)"
        )
    return inner


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
        machines: Sequence[str | None] | None = None,
        services: Sequence[str] | None = None,
        max_sources: int = 2,
        replicas: Sequence[int] = (1, 2),
    ) -> None:
        super().__init__(env)
        if max_sources < 0 or not replicas or any(not 1 <= r <= 16 for r in replicas):
            raise ValueError(
                f"max_sources must be >= 0 and replicas counts within 1-16, got {max_sources}, {list(replicas)}"
            )
        algos = tuple(ALGORITHMS if algorithms is None else algorithms)
        if not algos or any(a not in ALGORITHMS for a in algos):
            raise ValueError(
                f"algorithms must be a non-empty subset of {list(ALGORITHMS)}, got {list(algos)}"
            )
        kinds = tuple((None,) if machines is None else machines)
        if not kinds or len(set(kinds)) != len(kinds):
            raise ValueError(f"machines must be distinct machine type names (or None), got {list(kinds)}")
        for m in kinds:
            if m is not None:
                TrainModel.model_validate({"dataset": "raw/x.csv", "algorithm": algos[0], "machine": m})
        svcs = tuple(SERVICES if services is None else services)
        if not svcs or any(x not in SERVICES for x in svcs):
            raise ValueError(f"services must be a non-empty subset of {list(SERVICES)}, got {list(svcs)}")
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
            machines=kinds,
            services=svcs,
            max_sources=max_sources,
            replicas=tuple(int(r) for r in replicas),
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
        self._slots_cache: tuple[tuple[Any, ...], list[Slot]] | None = None
        self._valid_cache: dict[tuple[int, Any], bool] = {}
        self._by_content = not templates
        """Only the curated templates and the masked fallbacks build slots, so what they read is known."""
        self._built: OrderedDict[tuple[Any, ...], tuple[Any, list[Slot]]] = OrderedDict()
        """Slot lists by what the curated templates read (kept across steps and episodes; see ``slots``)."""

    # ----------------------------------------------------------------------------------------- slots

    def slots(self) -> list[Slot]:
        """Every slot's concrete action and validity in the current state.

        Computed once per state: the list is kept until the episode's step, datasets, jobs or credits
        change (the mask is asked for several times between two steps), and an action's validation
        against the action models and the scenario's hard constraints is remembered by its content.
        When no template was given (the curated ones and the always-masked fallbacks build every slot), the
        list is also remembered by everything those templates read (the scenario, the dataset and job
        slots' contents, whether credits are left, whether the episode is over): a state that recurs, later
        in the episode or in a later episode of the same scenario, gets its list back without building it
        (up to :data:`SLOT_LISTS_KEPT` lists)."""
        inner = in_process_env(self.env)
        st = inner.episode
        key = (
            id(st),
            st.step,
            st.done,
            st.credits_left,
            len(st.datasets),
            tuple((j.state, j.run_id) for j in st.jobs.values()),
        )
        if self._slots_cache is not None and self._slots_cache[0] == key:
            return list(self._slots_cache[1])
        caps = (inner.supports("faults.services"), inner.supports("sources"), inner.supports("serving"))
        content = self._content_of(st, caps) if self._by_content else None
        if content is not None:
            kept = self._built.get(content)
            if kept is not None and kept[0] is st.scenario:  # the scenario itself, not a reused id
                self._built.move_to_end(content)
                self._slots_cache = (key, kept[1])
                return list(kept[1])
        ctx = dataclasses.replace(
            self._probe,
            state=st,
            has_services=caps[0],
            kind_train_slots=kind_train_slots(st),
            kind_preparations=kind_preparations(st),
            dataset_names=tuple(st.datasets),
            has_credits=st.credits_left > 0,
            has_sources=caps[1],
            has_serving=caps[2],
        )
        out: list[Slot] = []
        for tpl, i in self._index:
            action, ok = tpl.build(ctx, i)
            if ok and ctx.state.done:
                ok = False
            if ok:
                ok = self._acceptable(action, ctx.state.scenario)
            out.append((action, ok))
        self._slots_cache = (key, out)
        if content is not None:
            self._built[content] = (st.scenario, out)
            if len(self._built) > SLOT_LISTS_KEPT:
                self._built.popitem(last=False)
        return list(out)

    def _content_of(self, st: EpisodeState, caps: tuple[bool, ...]) -> tuple[Any, ...]:
        """Everything the curated templates read from the episode and the backend's capabilities ``caps``
        (see :meth:`slots`)."""
        names = tuple(st.datasets)[: self._probe.max_datasets]
        datasets = tuple((n, st.datasets[n].target is not None) for n in names)
        jobs = []
        for j in range(self._probe.max_jobs):
            job = st.jobs.get(self._probe.job_id(j))
            jobs.append(None if job is None else (job.state, job.run_id, job.dataset in st.datasets))
        return (
            id(st.scenario),
            caps,
            st.done,
            st.credits_left > 0,
            datasets,
            tuple(jobs),
            tuple(st.registered),
            st.serving.served_version,
            tuple(n for n in st.datasets if n.startswith("sources/")),
        )

    def _acceptable(self, action: dict[str, Any], scenario: Any) -> bool:
        """Whether the action validates and no hard constraint of the scenario forbids it."""
        key = (id(scenario), _content_key(action))
        hit = self._valid_cache.get(key)
        if hit is None:
            try:
                validated = parse_action(action).model_dump(mode="json")
            except ActionError:
                hit = False
            else:  # the scenario's hard constraints forbid it (it would end the episode)
                hit = not _violates(scenario, validated)
            if len(self._valid_cache) >= 8192:
                self._valid_cache.clear()
            self._valid_cache[key] = hit
        return hit

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


def _content_key(action: dict[str, Any]) -> Any:
    """A hashable key equal for actions of equal content (each value's type counts: 1, 1.0 and True differ)."""
    try:
        key = tuple(sorted((k, type(v), v) for k, v in action.items()))
        hash(key)
    except TypeError:  # a nested value (a list or a dict): its JSON text
        return json.dumps(action, sort_keys=True, default=str)
    return key


def _violates(scenario: Any, action: dict[str, Any]) -> bool:
    try:
        from mlsandbox.evaluation.constraints import check_action
    except ImportError:  # a tree without hard constraints
        return False
    return check_action(scenario, action) is not None


def _args(action: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in action.items() if k != "type")


STRATEGY_FLAGS: tuple[str, ...] = ("impute", "clip_outliers", "drop_na")
"""Lineage flags of a dataset: imputed (mean or median), outliers clipped, rows with gaps dropped."""
ERROR_CODES: tuple[str, ...] = (
    "invalid_parameters",
    "not_found",
    "conflict",
    "backend_error",
    "budget_exhausted",
    "unknown_action",
    "unsupported",
)
"""Error codes with a feature of their own (any other code counts as ``other``)."""


def _lineage_flag(strategy: str) -> str:
    return "impute" if strategy.startswith("impute_") else strategy


@dataclass
class Memory:
    """What the agent has learnt from its observations in the current episode (see the module docstring):
    kept by :class:`FlatObservation` from each action it passes on and the observation that came back."""

    profiles: dict[str, tuple[bool, bool, float]] = dataclasses.field(default_factory=dict)
    """dataset -> (missing values seen, outliers seen, largest missing rate of a column)."""
    lineage: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    """dataset -> the :data:`STRATEGY_FLAGS` of the cleanings that made it (its parents' included)."""
    exit_codes: dict[str, int] = dataclasses.field(default_factory=dict)
    registered_runs: set[str] = dataclasses.field(default_factory=set)
    health: dict[str, bool] = dataclasses.field(default_factory=dict)
    """service -> healthy at its last probe (or after its restart)."""
    restarted: set[str] = dataclasses.field(default_factory=set)
    last_error: str | None = None
    train_positions: dict[str, int | None] = dataclasses.field(default_factory=dict)
    """job -> the ``train_model`` position (the kind's RL slot) its training took (a retry keeps its job's)."""
    ingested: set[str] = dataclasses.field(default_factory=set)
    """Sources ingested into the lake."""
    deployed: bool = False
    """A deployment of the goal's model answered ready."""

    def update(
        self,
        action: dict[str, Any] | None,
        observation: dict[str, Any],
        goal_model: str,
        kind: TaskKind | None = None,
    ) -> None:
        """Learn from ``observation``, the answer to ``action`` (``kind``: the episode's kind of work, whose
        RL slots name the position of a training)."""
        error = observation.get("error") or {}
        self.last_error = error.get("code") if not observation.get("ok", True) else None
        if not observation.get("ok") or not isinstance(action, dict):
            return
        action_type = action.get("type")
        result = observation.get("result") or {}
        if action_type == "check_data_quality":
            columns = list(((result.get("profile") or {}).get("column_profiles") or {}).values())
            rates = [float(c.get("missing_rate") or 0.0) for c in columns]
            self.profiles[str(action.get("dataset"))] = (
                any((c.get("missing") or 0) > 0 for c in columns),
                any((c.get("outliers") or 0) > 0 for c in columns),
                max(rates, default=0.0),
            )
        elif action_type == "clean_dataset" and isinstance(result.get("dataset"), str):
            parent = self.lineage.get(str(result.get("source")), frozenset())
            self.lineage[result["dataset"]] = parent | {_lineage_flag(str(result.get("strategy")))}
        elif action_type in ("train_model", "retry_job") and isinstance(result.get("job_id"), str):
            self.train_positions[result["job_id"]] = self._position(action, result, kind)
        elif action_type == "get_job" and isinstance(result.get("exit_code"), int):
            self.exit_codes[str(result.get("job_id"))] = int(result["exit_code"])
        elif action_type == "register_model" and result.get("name") == goal_model:
            self.registered_runs.add(str(result.get("run_id")))
        elif action_type == "ingest_source":
            self.ingested.add(str(result.get("source") or action.get("source")))
        elif action_type == "deploy_model" and action.get("name") == goal_model:
            self.deployed = True
        elif action_type == "get_service_health":
            self.health[str(action.get("service"))] = bool(result.get("healthy"))
        elif action_type == "restart_service":
            service = str(result.get("restarted") or action.get("service"))
            self.restarted.add(service)
            self.health[service] = bool(result.get("healthy", True))

    def _position(self, action: dict[str, Any], result: dict[str, Any], kind: TaskKind | None) -> int | None:
        """The ``train_model`` position a training (or a retry: its job's, unless it changed the algorithm) took."""
        algorithm = str(result.get("algorithm") or action.get("algorithm"))
        if action.get("type") == "retry_job":
            retried = str(result.get("retry_of"))
            changes = action.get("changes") or {}
            if (
                retried in self.train_positions
                and "algorithm" not in changes
                and "hyperparams" not in changes
            ):
                return self.train_positions[retried]
            return kind.train_position(algorithm, changes.get("hyperparams")) if kind is not None else None
        return kind.train_position(algorithm, action.get("hyperparams")) if kind is not None else None


class FlatObservation(gym.ObservationWrapper[np.ndarray, Any, Any]):
    """The episode state as a ``Box`` of float32 in [0, 1]; see the module docstring."""

    JOB_STATES = ("queued", "running", "succeeded", "failed", "cancelled")
    TIME_FEATURES = ("has_deadline", "seconds_left", "has_window", "window_credits_left", "window_frees_in")
    """The deadline and the rolling compute window, from the observation's ``budget`` (zeros without them)."""

    def __init__(
        self,
        env: gym.Env[Any, Any],
        *,
        max_datasets: int = 6,
        max_jobs: int = 4,
        kind_features: bool = False,
        time_features: bool = False,
        max_sources: int = 2,
    ) -> None:
        super().__init__(env)
        self.max_datasets = max_datasets
        self.max_jobs = max_jobs
        self.max_sources = max_sources
        self.kinds: tuple[str, ...] = tuple(kinds()) if kind_features else ()
        """Kinds of the one-hot kind features (empty: none; see the module docstring)."""
        self.types = list(get_catalog().types)
        self.memory = Memory()
        self._action: dict[str, Any] | None = None
        self.time_features = time_features
        """Whether :attr:`TIME_FEATURES` follow the first six features (see the module docstring)."""
        n = 6 + (len(self.TIME_FEATURES) if time_features else 0) + len(self.types) + 3 * max_datasets
        n += (len(self.JOB_STATES) + 2) * max_jobs
        n += (4 + len(STRATEGY_FLAGS)) * max_datasets
        n += (len(ALGORITHMS) + len(STRATEGY_FLAGS) + 3) * max_jobs
        n += 3 * len(SERVICES) + len(ERROR_CODES) + 1
        n += 2 * max_sources + 1
        n += len(self.kinds)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(n,), dtype=np.float32)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        self.memory = Memory()
        self._action = None
        obs, info = super().reset(**kwargs)
        info["kind"] = episode_kind(in_process_env(self.env).episode).name
        return obs, info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        self._action = _as_action(action)
        obs, reward, terminated, truncated, info = super().step(action)
        info["kind"] = episode_kind(in_process_env(self.env).episode).name
        return obs, reward, terminated, truncated, info

    def observation(self, observation: Any) -> np.ndarray:
        inner = in_process_env(self.env)
        st = inner.episode
        sc = st.scenario
        obs = inner.last_observation or {}
        mem = self.memory
        kind = episode_kind(st)
        if self._action is not None:
            mem.update(self._action, obs, sc.goal.model_name, kind)
            self._action = None
        f: list[float] = [
            min(1.0, st.step / max(1, sc.max_steps)),
            st.credits_left / sc.budget.credits if sc.budget.credits else 0.0,
            float(bool(obs.get("ok", True))),
            float(st.submitted),
            min(1.0, len(st.registered) / 3),
            float(any(n == sc.goal.model_name for n, _ in st.registered)),
        ]
        if self.time_features:
            f += _time_features(sc.budget, obs.get("budget") or {})
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
        # -- what the agent learnt from its observations
        for i in range(self.max_datasets):
            key = keys[i] if i < len(keys) else None
            profile = mem.profiles.get(key) if key is not None else None
            flags = mem.lineage.get(key, frozenset()) if key is not None else frozenset()
            f += [float(profile is not None)]
            f += [float(profile[0]), float(profile[1]), profile[2]] if profile else [0.0, 0.0, 0.0]
            f += [float(flag in flags) for flag in STRATEGY_FLAGS]
        for j in range(self.max_jobs):
            job_id = f"job-{j + 1}"
            job = st.jobs.get(job_id)
            data_flags = mem.lineage.get(job.dataset, frozenset()) if job is not None else frozenset()
            if job is None:
                position = None
            elif job_id in mem.train_positions:
                position = mem.train_positions[job_id]
            else:
                position = kind.train_position(job.algorithm)
            f += [float(position == p) for p in range(len(ALGORITHMS))]
            f += [float(job is not None and flag in data_flags) for flag in STRATEGY_FLAGS]
            code = mem.exit_codes.get(job_id)
            f += [
                float(job is not None and job.run_id is not None and job.run_id in mem.registered_runs),
                float(code == 137),
                float(code is not None and code not in (0, 137)),
            ]
        for service in SERVICES:
            healthy = mem.health.get(service)
            f += [float(healthy is True), float(healthy is False), float(service in mem.restarted)]
        f += [float(mem.last_error == c) for c in ERROR_CODES]
        f += [float(mem.last_error is not None and mem.last_error not in ERROR_CODES)]
        sources = [src.name for src in sc.sources]
        for i in range(self.max_sources):
            f += [float(i < len(sources)), float(i < len(sources) and sources[i] in mem.ingested)]
        f += [float(mem.deployed)]
        f += [float(kind.name == k) for k in self.kinds]
        return np.clip(np.asarray(f, dtype=np.float32), 0.0, 1.0)


def _time_features(budget: Any, seen: dict[str, Any]) -> list[float]:
    """:attr:`FlatObservation.TIME_FEATURES`: whether the episode has a deadline and the share of it left;
    whether it has a compute window, the share of the window's credits left and the share of its seconds
    until spent credits free up (0 while any are left)."""
    deadline, window = budget.deadline_s, budget.window
    left = seen.get("seconds_left")
    credits, frees = seen.get("window_credits_left"), seen.get("window_frees_in_s")
    return [
        float(deadline is not None),
        float(left) / deadline if deadline and left is not None else 0.0,
        float(window is not None),
        float(credits) / window.credits if window is not None and credits is not None else 0.0,
        float(frees) / window.seconds if window is not None and frees is not None else 0.0,
    ]


def _as_action(action: Any) -> dict[str, Any] | None:
    """The action as a dict (what :class:`Memory` reads); None when it is not an action at all."""
    if isinstance(action, dict):
        return action
    if isinstance(action, str):
        try:
            value = json.loads(action)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    dump = getattr(action, "model_dump", None)
    return dump(mode="json") if callable(dump) else None


class SuiteEpisodes(gym.Wrapper[Any, Any, Any, Any]):
    """Each ``reset`` plays a scenario drawn from ``scenarios`` (e.g. the ``train`` split of a suite), with
    an episode seed drawn among the ``seeds_per_scenario`` seeds from the scenario's own seed on (a
    suite variant's seeds stay in its split's range). The draws come from a generator seeded by the
    first ``reset(seed=...)``. A reset whose ``options`` name a scenario plays that one, with the given
    seed, as the env would. Each step's ``info["scenario"]`` names the scenario played.

    :meth:`set_weights` makes the draw two-step: a scenario id (a family, when the scenarios are a
    family's instances or its curriculum variants, which keep its id) drawn by its weight, then one of
    that id's scenarios evenly; a training run that samples the families it fails more often sets them
    (``env_method("set_weights", {...})``). Without weights every scenario is as likely.

    Place it directly around :class:`~mlsandbox.env.gym_env.MLSandboxEnv` (below the RL wrappers, which
    reset it without options)."""

    def __init__(
        self, env: gym.Env[Any, Any], scenarios: Sequence[Any], *, seeds_per_scenario: int = 1
    ) -> None:
        super().__init__(env)
        if not scenarios:
            raise ValueError("scenarios is empty")
        if seeds_per_scenario < 1:
            raise ValueError(f"seeds_per_scenario must be at least 1, got {seeds_per_scenario}")
        self.scenarios = list(scenarios)
        self.seeds_per_scenario = seeds_per_scenario
        self.weights: dict[str, float] | None = None
        self._rng: np.random.Generator | None = None
        self._playing: str | None = None

    def set_weights(self, weights: dict[str, float] | None) -> dict[str, float] | None:
        """Draw each episode's scenario id by these weights from the next reset on (None: every scenario
        as likely). An id not named weighs 0; weights must be finite, at least 0, and not all 0."""
        if weights is not None:
            values = list(weights.values())
            if not values or any(not math.isfinite(w) or w < 0 for w in values) or not sum(values) > 0:
                raise ValueError(f"weights must be finite, at least 0 and not all 0, got {weights}")
            weights = {str(k): float(v) for k, v in weights.items()}
        self.weights = weights
        return weights

    def _draw(self, rng: np.random.Generator) -> Any:
        if self.weights is None:
            return self.scenarios[int(rng.integers(len(self.scenarios)))]
        ids = list(dict.fromkeys(str(s.id) for s in self.scenarios))
        w = np.array([self.weights.get(i, 0.0) for i in ids])
        if not w.sum() > 0:  # none of the weighted ids is played in this stage: as without weights
            return self.scenarios[int(rng.integers(len(self.scenarios)))]
        chosen = ids[int(rng.choice(len(ids), p=w / w.sum()))]
        pool = [s for s in self.scenarios if str(s.id) == chosen]
        return pool[int(rng.integers(len(pool)))]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if options and options.get("scenario") is not None:
            given = options["scenario"]
            self._playing = str(getattr(given, "id", given))
            return self.env.reset(seed=seed, options=options)
        if self._rng is None or seed is not None:
            self._rng = np.random.default_rng(seed)
        scenario = self._draw(self._rng)
        self._playing = str(scenario.id)
        episode_seed = int(scenario.seed) + int(self._rng.integers(self.seeds_per_scenario))
        return self.env.reset(seed=episode_seed, options={**(options or {}), "scenario": scenario})

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "scenario": self._playing}


class StagedEpisodes(SuiteEpisodes):
    """:class:`SuiteEpisodes` over one of several lists of scenarios (a curriculum's stages, easiest first):
    each ``reset`` draws from ``stages[stage]``. :meth:`set_stage` switches the list for the episodes that
    start from then on (a vector env calls it in each of its envs: ``env_method("set_stage", k)``); the
    observation does not say which stage is played."""

    def __init__(
        self, env: gym.Env[Any, Any], stages: Sequence[Sequence[Any]], *, seeds_per_scenario: int = 1
    ) -> None:
        if not stages or any(not s for s in stages):
            raise ValueError("stages is empty or has an empty stage")
        super().__init__(env, stages[0], seeds_per_scenario=seeds_per_scenario)
        self.stages = [list(s) for s in stages]
        self.stage = 0

    def set_stage(self, stage: int) -> int:
        """Play ``stages[stage]`` from the next reset on; returns the stage."""
        if not 0 <= stage < len(self.stages):
            raise ValueError(f"stage {stage} is not one of the {len(self.stages)} stages")
        self.stage = stage
        self.scenarios = self.stages[stage]
        return stage


class NoveltyBonus(gym.Wrapper[Any, Any, Any, Any]):
    """A count-based exploration bonus for training (off unless a training run asks for it): each step's
    reward gains ``scale / sqrt(n)``, ``n`` the number of times this env has seen the step's abstract state
    (the milestones the episode has reached, ``info["milestones"]``, with the type of the action just taken
    and whether it was carried out). A chain of steps that random play seldom finishes (train, wait,
    register, deploy, wait while the traffic runs, submit) is then worth exploring for itself, and the
    bonus fades as the states grow familiar. It is a training signal only: it is in
    ``info["novelty_bonus"]``, evaluation plays without it, and the observation is unchanged.

    Place it directly around :class:`SuiteEpisodes` (below the RL wrappers, which pass the reward on)."""

    def __init__(self, env: gym.Env[Any, Any], scale: float) -> None:
        super().__init__(env)
        if not scale > 0:
            raise ValueError(f"the novelty bonus's scale is positive, got {scale}")
        self.scale = float(scale)
        self.counts: dict[tuple[Any, ...], int] = {}

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        key = (tuple(info.get("milestones") or ()), info.get("action"), info.get("error") is None)
        n = self.counts[key] = self.counts.get(key, 0) + 1
        bonus = self.scale / math.sqrt(n)
        return obs, float(reward) + bonus, terminated, truncated, {**info, "novelty_bonus": bonus}


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
    machines: Sequence[str | None] | None = None,
    services: Sequence[str] | None = None,
    kind_features: bool = False,
    time_features: bool = False,
    instances: int | None = None,
    **env_kwargs: Any,
) -> gym.Env[np.ndarray, np.int64]:
    """``MLSandboxEnv`` with :class:`FlatObservation` and :class:`DiscreteActions` (masks via ``action_masks``;
    ``kind_features``: the episode's kind in the observation; ``time_features``: its deadline and compute
    window (:attr:`FlatObservation.TIME_FEATURES`); ``instances``: each episode at one of this many
    seeds from the scenario's own, a train split whose fits the fit store serves again (a
    :class:`SuiteEpisodes` under the RL wrappers; None: the env's own seed draws, new data every episode)."""
    base = MLSandboxEnv(scenario, **env_kwargs)
    env: gym.Env[Any, Any] = base
    if instances is not None:
        env = SuiteEpisodes(base, [base.scenario], seeds_per_scenario=instances)
    env = FlatObservation(
        env,
        max_datasets=max_datasets,
        max_jobs=max_jobs,
        kind_features=kind_features,
        time_features=time_features,
    )
    return DiscreteActions(
        env,
        action_types=action_types,
        max_datasets=max_datasets,
        max_jobs=max_jobs,
        wait_seconds=wait_seconds,
        allow_restart=allow_restart,
        algorithms=algorithms,
        templates=templates,
        machines=machines,
        services=services,
    )


__all__ = [
    "MASKED_ACTION",
    "TEMPLATES",
    "DiscreteActions",
    "FlatObservation",
    "Memory",
    "NoveltyBonus",
    "SlotContext",
    "StagedEpisodes",
    "SuiteEpisodes",
    "Template",
    "in_process_env",
    "make_rl_env",
]
