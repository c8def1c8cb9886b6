"""An automatic curriculum over a family: easier variants of the declared scenario first, the family itself last.

A stage is the declared scenario after a :class:`Loosening`, a typed transformation of four of its
declared fields (the same parameter paths a family's ``space:`` draws, written with
:func:`~mlsandbox.scenario.space.apply_parameters`; nothing else of the scenario changes, but for the
family's parameter space, which a stage drops: it is one variant, not a family to draw from):

- ``bar`` (a factor, at least 1): the goal's bar moved toward easy. A ``registered_model_metric`` goal's
  ``threshold`` or ``baseline_ratio`` is multiplied by the factor when its metric is one to minimise
  (MASE, RMSE: a higher bar is looser) and divided by it when the metric is one to maximise; a
  ``registered_model_auc`` goal's ``min_auc`` keeps ``1/bar`` of its margin over chance (0.5). Other goal
  types keep their bar.
- ``budget`` (a factor, at least 1): ``max_steps`` and ``budget.credits`` multiplied (steps rounded up,
  at most 10,000).
- ``defects`` (a share from 0 to 1): the share of each dataset's declared defects kept: a tabular
  dataset's ``defects`` rates (``missing_rate``, ``outlier_rate``, each injection's ``rate``) multiplied
  (the injections dropped at 0),
  a time series' ``gaps.count`` and late data's ``unsettled_days`` rounded down (none at 0; its
  ``restated_share`` multiplied), the first of its ``level_shifts`` kept (none at 0), and a text or image
  dataset's own defect rates (:data:`RATE_DEFECTS`: label noise, duplicates, empty, truncated, unreadable,
  mis-sized) multiplied. A dataset that declares no defects is unchanged.
- ``faults`` (a share from 0 to 1): the share of the declared faults (``perturbations``) kept: a fault
  that lasts some steps keeps that share of them, rounded down (dropped at 0), one that lasts some seconds
  that share of them, and one that lasts until it is mitigated (it is there or not) is kept in that share
  of the stage's episodes (:func:`variants`); none is kept at 0. An API's six-step outage is gone in the
  first default stage and lasts three steps in the second; a tracker killed while a job runs, to be
  restarted by the agent, is in none of the first stage's episodes and in half of the second's.

:data:`DEFAULT_STAGES` go from ``Loosening(bar=1.5, budget=2, defects=0, faults=0)`` to the declared family
(``Loosening()``, which changes nothing). :class:`Curriculum` advances from one stage to the next when
the success rate over the last ``window`` training episodes finished in the stage reaches ``threshold``,
or when the stage has used ``max_share`` of the training's env-steps (so the declared family always gets
the rest). An episode under way at a change finishes in the stage it began in (and counts in the next
stage's window). A family whose loosened bar a weaker solution meets wants stages that keep the bar
(``churn-decisions``: gradient boosting meets the first default stage's bar, and only a linear model meets
the family's); it declares them in its scenario's ``curriculum:`` (:func:`declared_stages`), which the run
plays for it in place of the default ones. In a run over several families the lists are aligned on their
last stage, the family as declared (:func:`stage_scenarios`). ``mlsandbox train --stage SPEC`` (repeated)
sets every family's stages (:func:`parse_stages`). The reward, its potential-based shaping included, is the same in every stage. Success in
a stage is graded by the stage's own goal; the observation never says which stage an episode belongs to,
and evaluation always plays the declared family (see :func:`~mlsandbox.agents.training.evaluate`).

A curriculum can also run over a family's *generated instances* (``mlsandbox train --generated N``: the
family's ``space:`` drawn and each draw gated in ``sim``, see :mod:`mlsandbox.instances.gates`). Its stages
are :class:`EasiestShare`: the easiest share of each family's instances by their difficulty estimate (the
reference agent's margin and whether the rule agent succeeds), each loosened too: :data:`INSTANCE_STAGES`
go from the easiest third, loosened as the first default stage, to every instance as generated
(:func:`instance_stages`). The same :class:`Curriculum` decides when to move on.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mlsandbox.scenario import Scenario
from mlsandbox.scenario.space import apply_parameters
from mlsandbox.scenario.stages import Loosening, check_harder, with_declared

_S = TypeVar("_S")

RATE_DEFECTS = ("label_noise", "duplicate_rate", "empty_rate", "truncated_rate", "unreadable_rate",
                "size_mismatch_rate")  # fmt: skip
"""A dataset's own defect rates (the text and image kinds): a stage multiplies them by its share kept."""
FAULT_VARIANTS = 4
"""Variants of each scenario in a stage that keeps a share of the faults (see :func:`variants`)."""
MAX_STEPS_LIMIT = 10_000
"""A scenario's ``max_steps`` may not exceed this (its model's bound)."""


DEFAULT_STAGES: tuple[Loosening, ...] = (
    Loosening(bar=1.5, budget=2.0, defects=0.0, faults=0.0),
    Loosening(bar=1.25, budget=1.5, defects=0.5, faults=0.5),
    Loosening(),
)
"""The stages ``mlsandbox train --curriculum`` goes through, easiest first; the last is the family."""


@dataclass(frozen=True)
class EasiestShare:
    """A stage of a curriculum over generated instances: the easiest ``share`` of each family's instances
    by their difficulty estimate, each made easier by ``loosening`` (``EasiestShare(1.0)``: all of them,
    as generated)."""

    share: float
    loosening: Loosening = field(default_factory=Loosening)

    def __post_init__(self) -> None:
        if not 0 < self.share <= 1:
            raise ValueError(f"share is in (0, 1], got {self.share}")

    @property
    def declared(self) -> bool:
        return self.share == 1 and self.loosening.declared

    def at_least_as_easy_as(self, other: EasiestShare) -> bool:
        return self.share <= other.share and self.loosening.at_least_as_easy_as(other.loosening)

    def as_dict(self) -> dict[str, float]:
        return {"easiest_share": round(self.share, 4), **self.loosening.as_dict()}


INSTANCE_STAGES: tuple[EasiestShare, ...] = (
    EasiestShare(1 / 3, DEFAULT_STAGES[0]),
    EasiestShare(2 / 3, DEFAULT_STAGES[1]),
    EasiestShare(1.0),
)
"""The stages of ``mlsandbox train --generated``: each family's easiest third loosened as the first of
:data:`DEFAULT_STAGES`, its easiest two thirds loosened as the second, then every instance as generated."""


@dataclass(frozen=True)
class Ranked:
    """A generated instance as a curriculum ranks it: its family, its scenario and its difficulty
    estimate (0 easy, 1 hard: :class:`~mlsandbox.instances.models.Difficulty`)."""

    family: str
    scenario: Scenario
    estimate: float


def instance_stages(
    instances: Sequence[Ranked], stages: Sequence[EasiestShare] = INSTANCE_STAGES
) -> list[list[Scenario]]:
    """The scenarios of each stage, easiest first: per family, its instances sorted by difficulty estimate
    (then id, so ties keep one order), of which a stage keeps the first ``ceil(share * n)`` (at least
    one), each loosened by the stage's :class:`Loosening`. The last stage must be (and is) every instance
    as generated."""
    if not instances:
        raise ValueError("no generated instance to train on")
    if not stages or not stages[-1].declared:
        raise ValueError("a curriculum's last stage holds every instance as generated: EasiestShare(1.0)")
    check_harder(stages)
    families: dict[str, list[Ranked]] = {}
    for r in instances:
        families.setdefault(r.family, []).append(r)
    ordered = {f: sorted(rs, key=lambda r: (r.estimate, r.scenario.id)) for f, rs in families.items()}
    mixed = any(_untimed(r.scenario) for r in instances)
    return [
        [
            v
            for rs in ordered.values()
            for r in rs[: max(1, math.ceil(stage.share * len(rs)))]
            for v in variants(r.scenario, stage.loosening, mixed=mixed)
        ]
        for stage in stages
    ]


def _metric_direction(scenario: Scenario) -> str:
    from mlsandbox.tasks.registry import kind_of

    goal = scenario.goal
    return str(kind_of(scenario.dataset(goal.dataset)).metric(getattr(goal, "metric", None)).direction)


def _goal_params(scenario: Scenario, bar: float) -> dict[str, Any]:
    goal = scenario.goal
    if bar == 1:
        return {}
    if goal.type == "registered_model_auc":
        min_auc = float(goal.min_auc)
        return {"goal.min_auc": round(0.5 + (min_auc - 0.5) / bar, 6)}
    if goal.type != "registered_model_metric":
        return {}
    looser = (lambda v: v * bar) if _metric_direction(scenario) == "min" else (lambda v: v / bar)
    name = "threshold" if getattr(goal, "threshold", None) is not None else "baseline_ratio"
    value = getattr(goal, name)
    if name == "threshold" and value < 0:  # a negative bar to maximise (an R^2) moves down, not toward 0
        looser = (lambda v: v * bar) if _metric_direction(scenario) == "max" else (lambda v: v / bar)
    return {f"goal.{name}": round(looser(value), 6)}


def _defect_params(data: dict[str, Any], keep: float) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if keep == 1:
        return params
    for i, ds in enumerate(data.get("datasets") or []):
        defects = ds.get("defects")
        if isinstance(defects, dict):
            for key in ("missing_rate", "outlier_rate"):
                if defects.get(key):
                    params[f"datasets.{i}.defects.{key}"] = round(defects[key] * keep, 6)
            injections = defects.get("injections") or []
            if injections and keep == 0:
                params[f"datasets.{i}.defects.injections"] = []
            for j, inj in enumerate(injections if keep else []):
                if isinstance(inj, dict) and isinstance(inj.get("rate"), int | float) and inj["rate"]:
                    params[f"datasets.{i}.defects.injections.{j}.rate"] = round(inj["rate"] * keep, 6)
        gaps = ds.get("gaps")
        if isinstance(gaps, dict) and gaps.get("count"):
            count = math.floor(gaps["count"] * keep)
            params[f"datasets.{i}.gaps"] = {**gaps, "count": count} if count else None
        late = ds.get("late")
        if isinstance(late, dict) and late.get("unsettled_days"):
            days = math.floor(late["unsettled_days"] * keep)
            restated = round(float(late.get("restated_share") or 0.0) * keep, 6)
            params[f"datasets.{i}.late"] = (
                {**late, "unsettled_days": days, "restated_share": restated} if days else None
            )
        for key in RATE_DEFECTS:  # the text and image kinds' defects are rates of the dataset itself
            if isinstance(ds.get(key), int | float) and ds[key]:
                params[f"datasets.{i}.{key}"] = round(ds[key] * keep, 6)
        shifts = ds.get("level_shifts")
        if isinstance(shifts, list) and shifts:
            params[f"datasets.{i}.level_shifts"] = shifts[: math.floor(len(shifts) * keep)]
    return params


def _untimed(scenario: Scenario) -> bool:
    """Whether the scenario declares a fault that lasts until it is mitigated or the episode ends."""
    return any(p.duration is None for p in scenario.perturbations)


def _fault_params(scenario: Scenario, keep: float, *, untimed: bool = True) -> dict[str, Any]:
    if (keep == 1 and untimed) or not scenario.perturbations:
        return {}
    kept = []
    for p in scenario.perturbations:
        if keep == 0 or (p.duration is None and not untimed):
            continue
        entry = p.model_dump(mode="json", exclude_none=True)
        if p.duration is not None and p.duration.steps is not None:
            steps = math.floor(p.duration.steps * keep)
            if not steps:
                continue
            entry["duration"] = {"steps": steps}
        elif p.duration is not None and p.duration.seconds is not None:
            entry["duration"] = {"seconds": round(p.duration.seconds * keep, 3)}
        kept.append(entry)
    return {"perturbations": kept}


def loosen(scenario: Scenario, loosening: Loosening, *, untimed: bool = True) -> Scenario:
    """``scenario`` made easier by ``loosening`` (the scenario itself, unchanged, for ``Loosening()``);
    ``untimed=False`` drops the faults that last until they are mitigated (see :func:`variants`)."""
    if loosening.declared and untimed:
        return scenario
    data = scenario.model_dump(mode="json", exclude_none=False)
    # A stage is one training variant, not a family to draw instances from: its loosened fields (a series
    # with no gaps left, say) need not keep the paths the family's parameter space draws.
    data["space"] = None
    params = {
        **_goal_params(scenario, loosening.bar),
        **_defect_params(data, loosening.defects),
        **_fault_params(scenario, loosening.faults, untimed=untimed),
    }
    if loosening.budget != 1:
        params["max_steps"] = min(MAX_STEPS_LIMIT, math.ceil(scenario.max_steps * loosening.budget))
        params["budget.credits"] = round(scenario.budget.credits * loosening.budget, 6)
    return Scenario.model_validate(apply_parameters(data, params))


def variants(scenario: Scenario, loosening: Loosening, *, mixed: bool) -> list[Scenario]:
    """The stage's variants of ``scenario``, which its episodes draw from evenly. With ``mixed`` (a
    stage that keeps a share of the faults, of a set of scenarios some of which declare a fault that
    lasts until it is mitigated) there are :data:`FAULT_VARIANTS` of them for every scenario, so that each
    keeps its share of the episodes: such a fault can only be there or not, and it is in
    ``round(faults * FAULT_VARIANTS)`` of them (a timed fault is shortened in all). Otherwise one."""
    if not mixed or loosening.faults in (0, 1):
        return [loosen(scenario, loosening)]
    with_faults = round(loosening.faults * FAULT_VARIANTS)
    kept, dropped = loosen(scenario, loosening), loosen(scenario, loosening, untimed=False)
    return [kept] * with_faults + [dropped] * (FAULT_VARIANTS - with_faults)


def stage_scenarios(
    scenarios: Sequence[Scenario],
    stages: Sequence[Loosening] = DEFAULT_STAGES,
    *,
    own: Mapping[str, Sequence[Loosening]] | None = None,
) -> list[list[Scenario]]:
    """The scenarios of each stage, easiest first (see :func:`variants`); the last stage must be (and is)
    the declared ones. ``own``: a family's own stages by its id (:func:`declared_stages`), in place of
    ``stages`` for it. Lists of different lengths are aligned on their last stage (every family is played
    as declared in the last stage of the run), a shorter one playing its first stage until its turn comes
    (:func:`stage_of`)."""
    lists = {s.id: list((own or {}).get(s.id, stages)) for s in scenarios}
    for family_stages in lists.values():
        if not family_stages or not family_stages[-1].declared:
            raise ValueError("a curriculum's last stage is the family as declared: Loosening()")
        check_harder(family_stages)
    count = max(len(v) for v in lists.values())
    mixed = any(_untimed(s) for s in scenarios)
    return [
        [v for s in scenarios for v in variants(s, stage_of(lists[s.id], k, count), mixed=mixed)]
        for k in range(count)
    ]


def stage_of(stages: Sequence[_S], k: int, count: int) -> _S:
    """The stage of a family's ``stages`` played in stage ``k`` of a run of ``count`` stages: the lists
    aligned on their last, the first of a shorter list played until its turn."""
    return stages[max(0, len(stages) - count + k)]


STAGE_KEYS = ("bar", "budget", "defects", "faults")
"""The keys of a stage written as text (:func:`parse_stages`); ``share`` too over generated instances."""


def _parse_stage(spec: str, *, generated: bool) -> Loosening | EasiestShare:
    keys = (*STAGE_KEYS, "share") if generated else STAGE_KEYS
    values: dict[str, float] = {}
    for part in spec.split(","):
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep or key not in keys:
            raise ValueError(
                f"stage {spec!r}: {part.strip()!r} is not key=value with a key of {', '.join(keys)}"
            )
        if key in values:
            raise ValueError(f"stage {spec!r}: {key} is given twice")
        try:
            values[key] = float(raw)
        except ValueError:
            raise ValueError(f"stage {spec!r}: {key}={raw.strip()!r} is not a number") from None
    share = values.pop("share", 1.0)
    try:
        loosening = Loosening(**values)
        return EasiestShare(share, loosening) if generated else loosening
    except ValueError as e:
        raise ValueError(f"stage {spec!r}: {e}") from None


def parse_stages(specs: Sequence[str], *, generated: bool = False) -> list[Loosening] | list[EasiestShare]:
    """A curriculum's stages from text, easiest first, one ``key=value,...`` spec each
    (``"bar=1.5,budget=2,defects=0,faults=0"``; a key left out keeps the declared value, and over generated
    instances ``share=`` is the easiest share of each family's instances kept, all of them by default). The
    family as declared (or every instance as generated) is the last stage, added when the specs do not end
    with it. Raises :class:`ValueError` naming the spec at fault, or the pair that does not get harder."""
    if generated:
        shares = [_parse_stage(s, generated=True) for s in specs]
        instances = [s for s in shares if isinstance(s, EasiestShare)]
        if not instances or not instances[-1].declared:
            instances.append(EasiestShare(1.0))
        check_harder(instances)
        return instances
    loosenings = with_declared(
        [s for s in (_parse_stage(x, generated=False) for x in specs) if isinstance(s, Loosening)]
    )
    check_harder(loosenings)
    return loosenings


def declared_stages(scenarios: Sequence[Scenario]) -> dict[str, list[Loosening]]:
    """The stages each family declares (its scenario's ``curriculum:``), the family as declared last, by
    family id; a family that declares none is not in it (it plays the run's stages)."""
    return {s.id: with_declared(s.curriculum) for s in scenarios if s.curriculum}


@dataclass
class Curriculum:
    """When to move to the next stage: the success rate over the last ``window`` episodes finished in the
    current stage reaches ``threshold``, or the stage has used ``max_share`` of ``total_steps``."""

    stages: Sequence[Loosening | EasiestShare] = DEFAULT_STAGES
    own: Mapping[str, Sequence[Loosening]] = field(default_factory=dict)
    """Families' own stages by id (:func:`declared_stages`), in place of ``stages`` for them; the run has
    as many stages as the longest list (see :func:`stage_scenarios`)."""
    window: int = 50
    threshold: float = 0.6
    max_share: float = 0.25
    total_steps: int = 0
    stage: int = 0
    started: list[int] = field(default_factory=lambda: [0])
    """The env-step at which each stage reached so far began."""
    _recent: deque[bool] = field(default_factory=deque, repr=False)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"window must be at least 1, got {self.window}")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if not 0 < self.max_share <= 1:
            raise ValueError(f"max_share must be in (0, 1], got {self.max_share}")
        self._recent = deque(maxlen=self.window)

    @property
    def count(self) -> int:
        """The run's number of stages: the longest of ``stages`` and the families' own."""
        return max([len(self.stages), *(len(v) for v in self.own.values())])

    @property
    def last(self) -> bool:
        return self.stage == self.count - 1

    @property
    def success_rate(self) -> float | None:
        """The success rate over the window (None until the window is full)."""
        if len(self._recent) < self.window:
            return None
        return sum(self._recent) / len(self._recent)

    def record(self, success: bool, step: int) -> bool:
        """An episode finished in the current stage at env-step ``step``; True when the stage advances."""
        if self.last:
            return False
        self._recent.append(bool(success))
        rate = self.success_rate
        over_budget = bool(self.total_steps) and step - self.started[-1] >= self.max_share * self.total_steps
        if (rate is not None and rate >= self.threshold) or over_budget:
            self.stage += 1
            self.started.append(step)
            self._recent.clear()
            return True
        return False

    def summary(self) -> dict[str, Any]:
        """The settings and, for each stage of the run, the step it began at (None if never reached)
        with the run's own stage played in it; the families' own stages under ``families``."""

        started = [self.started[k] if k < len(self.started) else None for k in range(self.count)]
        out: dict[str, Any] = {
            "window": self.window,
            "threshold": self.threshold,
            "max_share": self.max_share,
            "stages": [
                {**stage_of(self.stages, k, self.count).as_dict(), "started_at_step": started[k]}
                for k in range(self.count)
            ],
        }
        if self.own:
            out["families"] = {
                family: [
                    {**stage_of(stages, k, self.count).as_dict(), "started_at_step": started[k]}
                    for k in range(self.count)
                ]
                for family, stages in self.own.items()
            }
        return out


@dataclass
class FailureSampling:
    """Task sampling for a run over several families: each family is drawn in proportion to
    ``floor + (1 - floor) * (1 - r)``, ``r`` its success rate over its last ``window`` training episodes (a
    family not played yet counts as failed), so the families the policy fails get up to ``1 / floor`` times
    the episodes of those it solves, and none is dropped (a solved family keeps being practised). A
    training run sets the weights in its envs at every curve point (``env_method("set_weights", w)``, see
    :class:`~mlsandbox.env.wrappers.SuiteEpisodes`) and ``history`` records them."""

    families: Sequence[str]
    window: int = 50
    floor: float = 0.25
    history: list[dict[str, Any]] = field(default_factory=list)
    _recent: dict[str, deque[bool]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.families:
            raise ValueError("no family to sample")
        if self.window < 1:
            raise ValueError(f"window must be at least 1, got {self.window}")
        if not 0 < self.floor <= 1:
            raise ValueError(f"floor must be in (0, 1], got {self.floor}")
        self._recent = {f: deque(maxlen=self.window) for f in self.families}

    def record(self, family: str | None, success: bool) -> None:
        """A training episode of ``family`` finished (an id not trained on is ignored)."""
        if family in self._recent:
            self._recent[family].append(bool(success))

    def weights(self, step: int | None = None) -> dict[str, float]:
        """Each family's weight now (recorded in ``history`` at ``step`` when given)."""
        out = {}
        for f, recent in self._recent.items():
            rate = sum(recent) / len(recent) if recent else 0.0
            out[f] = round(self.floor + (1 - self.floor) * (1 - rate), 4)
        if step is not None:
            self.history.append({"steps": step, "weights": out})
        return out

    def summary(self) -> dict[str, Any]:
        return {"window": self.window, "floor": self.floor, "history": self.history}


__all__ = [
    "DEFAULT_STAGES",
    "FAULT_VARIANTS",
    "INSTANCE_STAGES",
    "MAX_STEPS_LIMIT",
    "STAGE_KEYS",
    "Curriculum",
    "EasiestShare",
    "FailureSampling",
    "Loosening",
    "Ranked",
    "declared_stages",
    "instance_stages",
    "loosen",
    "parse_stages",
    "stage_of",
    "stage_scenarios",
    "variants",
]
