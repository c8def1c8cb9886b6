"""The task-kind seam: what the world needs of one kind of ML work, declared once.

A backend says *where* the world runs; a kind of work says *what* an agent is asked to produce. Each kind
(tabular binary classification, multi-class, regression, and any plug-in kind) is one :class:`TaskKind`
in one package (``mlsandbox.tasks.<kind>``, or a plug-in's own) that names:

- ``name``: the value of the dataset spec's ``kind`` field, and ``spec``: its pydantic model, a member of
  the :data:`~mlsandbox.tasks.registry.DatasetSpec` union discriminated by ``kind``;
- :meth:`TaskKind.generate`: its generator (train table with defects, hidden holdout, defect manifest) and
  ``formats``, the file formats it may be stored in;
- :meth:`TaskKind.profile`: what ``check_data_quality`` reports, and ``preparations``: the
  ``clean_dataset`` strategies that apply;
- ``algorithms``: the trainer's algorithms for it with their estimator parameters (an action's
  hyperparameters are validated against them), and :meth:`TaskKind.trainer_args`: how the trainer job is
  told the kind (``fit_task``: the trainer's own task name, which the sim real fit uses too);
- ``metrics``: the metrics a goal may name (the first is the default), each with its direction, and
  :meth:`TaskKind.score` / :meth:`TaskKind.baseline`: how the grader computes them on the hidden holdout;
- ``calibration_stand_ins``: its sim surrogate's timing of an algorithm not calibrated on its own (the sim's
  fit is the real one: :mod:`mlsandbox.backends.sim.realfit` runs the trainer's ``fit_task``), and
  ``size_field`` / ``calibration_sizes``: the spec field holding its data's size and the sizes the
  calibration sweep trains its families at;
- :meth:`TaskKind.predictions` and ``serving``: the serving request/response shape;
- :meth:`TaskKind.policy`: the rule agent's choice (preparation, algorithm, hyperparameters) from what
  the agent observed;
- ``rl_train_slots`` and ``rl_preparation_slots``: its RL slot templates, what each position of the RL
  action space's ``train_model`` and ``clean_dataset`` slots stands for in this kind (an algorithm with
  fixed hyperparameters, a strategy; default: its algorithms and preparations in order).

Nothing outside a kind's package branches on the kind: the world asks the registry
(:func:`mlsandbox.tasks.registry.kind_of`) and calls the declaration.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

Direction = Literal["max", "min"]


ResponseShape = Literal["binary", "multiclass", "number"]
"""What a deployment answers per row: ``binary``, a label and the positive class's probability;
``multiclass``, a class label and that class's probability; ``number``, a number (no probability). The
model server takes it as ``--response`` (its own copy of these names: it imports nothing of the world)."""


@dataclass(frozen=True)
class Metric:
    """A metric a goal may name: higher (``max``) or lower (``min``) is better."""

    name: str
    direction: Direction
    description: str = ""
    validation: str = ""
    """The metric the trainer logs on its validation split for it (default ``val_<name>``): what the
    serving pack's risky-deployment check reads of a version's run."""

    @property
    def logged(self) -> str:
        """The run metric that measures this metric on the validation split."""
        return self.validation or f"val_{self.name}"

    def better(self, value: float, bar: float) -> bool:
        """Whether ``value`` meets ``bar`` in this metric's direction."""
        return value >= bar if self.direction == "max" else value <= bar


@dataclass(frozen=True)
class Generated:
    """A generated dataset: the agent-visible training table (with the injected defects), the hidden
    holdout (a pandas frame, never shown to the agent) and the JSON-serialisable manifest (schema, signal,
    defects)."""

    train_table: Any
    """A ``pyarrow.Table``: what is written to the lake in each of the spec's formats."""
    holdout: Any
    """A ``pandas.DataFrame`` with the target column: the grader's ground truth."""
    manifest: dict[str, Any]


@dataclass(frozen=True)
class Policy:
    """What the rule agent does with a dataset of this kind, decided from its observed profile."""

    preparations: tuple[str, ...]
    """``clean_dataset`` strategies to apply, in order (empty: train on the raw data)."""
    algorithm: str
    hyperparams: dict[str, Any] = field(default_factory=dict)


RL_TRAIN_POSITIONS = 4
"""The RL action space's ``train_model`` positions per dataset (the binary kind's algorithm count): a kind
declares at most this many :class:`TrainSlot`."""
RL_PREPARATION_POSITIONS = 5
"""The RL action space's ``clean_dataset`` positions per dataset (the table kinds' strategy count)."""


@dataclass(frozen=True)
class TrainSlot:
    """What one ``train_model`` position of the RL action space trains in a kind: an algorithm with fixed
    hyperparameters (none: the estimator's defaults)."""

    algorithm: str
    hyperparams: tuple[tuple[str, Any], ...] = ()
    """``(name, value)`` pairs, JSON values (a tuple keeps the slot hashable)."""

    def action(self) -> dict[str, Any]:
        """The slot's fields of a ``train_model`` action (``algorithm``, and ``hyperparams`` when set)."""
        out: dict[str, Any] = {"algorithm": self.algorithm}
        if self.hyperparams:
            out["hyperparams"] = dict(self.hyperparams)
        return out


@dataclass(frozen=True)
class Serving:
    """The serving request/response shape of a kind (what a deployment of its model answers)."""

    request: str
    """What a request carries, e.g. ``rows of feature columns``."""
    response: str
    """What comes back per row, e.g. ``label and probability`` or ``a number``."""
    shape: ResponseShape | None = "binary"
    """The response's shape as the model server builds it (its ``--response``); None: what the model is
    decides (a label, with its probabilities when the model has them)."""


class TaskKind(ABC):
    """One kind of ML work (see the module docstring). Subclass it, set the class attributes, implement
    the abstract methods, and register an instance (built-ins by name in
    :data:`mlsandbox.tasks.registry.BUILTIN`; plug-ins through the ``mlsandbox.kinds`` entry-point group)."""

    name: ClassVar[str]
    """The dataset spec's ``kind`` value (``[a-z][a-z0-9_]*``)."""
    title: ClassVar[str]
    spec: ClassVar[type[BaseModel]]
    """The dataset spec model; its ``kind`` field is ``Literal[name]`` and it has ``name``, ``target``
    and ``formats`` fields."""
    metrics: ClassVar[tuple[Metric, ...]]
    """The metrics a goal may name; the first is the kind's default."""
    algorithms: ClassVar[Mapping[str, frozenset[str]]]
    """The trainer's algorithms for this kind, each with its estimator's parameter names."""
    preparations: ClassVar[tuple[str, ...]] = (
        "drop_na", "impute_mean", "impute_median", "clip_outliers", "drop_conflicting_duplicates"
    )  # fmt: skip
    """The ``clean_dataset`` strategies that apply to this kind's data."""
    formats: ClassVar[tuple[str, ...]] = ("csv", "parquet", "avro", "jsonl", "excel")
    """The file formats this kind's data may be stored in."""
    fit_task: ClassVar[str] = "binary"
    """The trainer's ``--task`` for this kind (``binary``, ``multiclass``, ``regression``): what the
    trainer job and the sim real fit build and report."""
    calibration_stand_ins: ClassVar[Mapping[str, str]] = {}
    """Algorithms of this kind without a calibration of their own, each timed in ``sim`` as the named
    calibrated algorithm (durations, CPU-seconds and memory; the fit itself is always real)."""
    size_field: ClassVar[str | None] = "rows"
    """The field of the dataset spec holding its size (a table's rows, a text set's documents, an image
    set's images; a series' days of history), which the calibration sweep sets to resize a dataset of this
    kind; None (or a field the spec has not): its datasets cannot be resized."""
    calibration_sizes: ClassVar[tuple[int | None, ...]] = (None, 6000)
    """The sizes (values of :attr:`size_field`) the calibration sweep's ``kind`` points train this kind's
    families at, so the fit sees how a job's cost grows with its data (None: the family's own size; only
    None when the spec has no size field)."""
    serving: ClassVar[Serving] = Serving("rows of feature columns", "a label and its probability per row")
    rl_train_slots: ClassVar[tuple[TrainSlot, ...] | None] = None
    """What the RL action space's ``train_model`` positions train, in order (at most
    :data:`RL_TRAIN_POSITIONS`; None: each of :attr:`algorithms` with its defaults). A position the kind
    does not fill is masked."""
    rl_preparation_slots: ClassVar[tuple[str, ...] | None] = None
    """The ``clean_dataset`` strategies of the RL action space's positions, in order (at most
    :data:`RL_PREPARATION_POSITIONS`; None: :attr:`preparations`)."""

    # ------------------------------------------------------------------------------------ the data

    @abstractmethod
    def generate(self, spec: Any, seed: int) -> Generated:
        """The dataset ``spec`` generated for ``seed``: deterministic (a pure function of both)."""

    def target(self, spec: Any) -> str:
        """The name of the spec's target column."""
        return str(spec.target)

    def profile(self, frame: Any, target: str | None) -> dict[str, Any]:
        """What ``check_data_quality`` reports of a frame of this kind (default: the tabular profile)."""
        from mlsandbox.data.profile import profile_frame

        return profile_frame(frame, target)

    def prepare(self, frame: Any, strategy: str, target: str | None) -> tuple[Any, dict[str, Any]]:
        """``clean_dataset``'s ``strategy`` (one of :attr:`preparations`) applied to ``frame``: the new
        frame and a summary of what changed (default: the tabular cleaning strategies)."""
        from mlsandbox.data.clean import clean_frame

        return clean_frame(frame, strategy, target)  # type: ignore[arg-type]

    # ------------------------------------------------------------------------------------ training

    def trainer_args(self, spec: Any) -> list[str]:
        """Extra arguments of the trainer job for a dataset of this kind (none for ``binary``)."""
        return [] if self.fit_task == "binary" else ["--task", self.fit_task]

    def check_algorithm(self, algorithm: str, hyperparams: Mapping[str, object] | None = None) -> None:
        """A :class:`ValueError` when ``algorithm`` does not fit this kind or names a hyperparameter its
        estimator does not have."""
        if algorithm not in self.algorithms:
            raise ValueError(
                f"algorithm {algorithm!r} does not fit this dataset's kind {self.name!r} "
                f"(its algorithms: {', '.join(self.algorithms)})"
            )
        unknown = sorted(set(hyperparams or {}) - self.algorithms[algorithm])
        if unknown:
            raise ValueError(
                f"unknown hyperparameter(s) for {algorithm}: {', '.join(unknown)} "
                f"(its estimator's parameters: {', '.join(sorted(self.algorithms[algorithm]))})"
            )

    # ------------------------------------------------------------------------------------ grading

    def metric(self, name: str | None = None) -> Metric:
        """The metric ``name`` (None: the default); a :class:`KeyError` naming the kind's metrics."""
        if name is None:
            return self.metrics[0]
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(
            f"metric {name!r} does not fit kind {self.name!r} (its metrics: "
            f"{', '.join(m.name for m in self.metrics)})"
        )

    @abstractmethod
    def score(self, metric: str, model: Any, holdout: Any, spec: Any) -> float:
        """``metric`` of ``model`` (a loaded registered version) on the hidden ``holdout``."""

    @abstractmethod
    def baseline(self, metric: str, holdout: Any, spec: Any) -> float:
        """``metric`` of the kind's trivial predictor on the hidden ``holdout`` (a relative bar's base)."""

    # ------------------------------------------------------------------------------------ serving

    def predictions(self, model: Any, frame: Any) -> list[dict[str, Any]]:
        """What a deployment answers for each row of ``frame`` (the serving response shape)."""
        out = model.predict(frame)
        return [{"prediction": v.item() if hasattr(v, "item") else v} for v in out]

    # ------------------------------------------------------------------------------------ agents

    def train_slots(self) -> tuple[TrainSlot, ...]:
        """What each RL ``train_model`` position trains (:attr:`rl_train_slots`, or the algorithms)."""
        if self.rl_train_slots is not None:
            return self.rl_train_slots
        return tuple(TrainSlot(a) for a in list(self.algorithms)[:RL_TRAIN_POSITIONS])

    def preparation_slots(self) -> tuple[str, ...]:
        """The RL ``clean_dataset`` positions' strategies (:attr:`rl_preparation_slots`, or the preparations)."""
        if self.rl_preparation_slots is not None:
            return self.rl_preparation_slots
        return tuple(self.preparations[:RL_PREPARATION_POSITIONS])

    def train_position(self, algorithm: str, hyperparams: Mapping[str, Any] | None = None) -> int | None:
        """The RL ``train_model`` position a training of ``algorithm`` with ``hyperparams`` took: the slot
        with exactly these settings, else the first of the algorithm's slots (None: no slot trains it)."""
        slots = self.train_slots()
        wanted = dict(hyperparams or {})
        for i, slot in enumerate(slots):
            if slot.algorithm == algorithm and dict(slot.hyperparams) == wanted:
                return i
        return next((i for i, slot in enumerate(slots) if slot.algorithm == algorithm), None)

    @abstractmethod
    def policy(self, profile: Mapping[str, Any]) -> Policy:
        """The rule agent's plan for a dataset of this kind from its ``check_data_quality`` profile."""

    def __repr__(self) -> str:
        return f"<TaskKind {self.name}>"


__all__ = [
    "RL_PREPARATION_POSITIONS",
    "RL_TRAIN_POSITIONS",
    "Direction",
    "Generated",
    "Metric",
    "Policy",
    "ResponseShape",
    "Serving",
    "TaskKind",
    "TrainSlot",
]
