"""What a trainer job learns in ``sim``: the trainer's own scikit-learn fit, run in this process.

A training job's metrics and model in ``sim`` are those of the real algorithm with the real
hyperparameters on the job's own rows: the same parse of the object's bytes, the same stratified
validation split, the same preprocessing pipeline and estimator, the same epoch loop (an ``mlp``'s loss
per epoch, and its divergence when the loss stops being finite) and the same metrics as
:mod:`mlsandbox.workloads.trainer`, whose functions this module calls (nothing is re-implemented). The
model a successful job registers is that fitted pipeline, so the grade's holdout AUC is the real model's.
A degenerate model (one stump, one epoch, a learning rate near zero) is as poor here as on ``local``.

Only what depends on the machine is modelled: durations, CPU-seconds, memory and service timings come
from the calibration (:mod:`mlsandbox.backends.sim.surrogate`), so the virtual clock stays deterministic.

Fits run single-threaded (one core for the simulator, as the benchmarks pin it) and are kept in a
bounded process-wide cache by (the bytes' digest, target, algorithm, hyperparameters, seed), and on disk
in the machine's fit store (:mod:`mlsandbox.backends.sim.fitstore`, shared by every process and kept
between runs): an episode that trains the same thing again, the other processes of a vector env, and the
next training run over the same instances pay for the fit once. Cached models are shared read-only.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlsandbox.backends.sim import fitstore
from mlsandbox.workloads import trainer

KEPT = 64
"""Fits kept in the process-wide cache (a fitted forest of 100 trees on a few thousand rows is a few MiB)."""


@dataclass(frozen=True)
class FitResult:
    """A real fit's outcome: its metrics and model, or how it failed (``failure`` = (mode, detail), a
    failure mode of the calibration and the library's own message)."""

    train_rows: int
    val_rows: int
    features: int
    epoch_lines: tuple[str, ...] = ()
    """The lines the epoch loop printed (an ``mlp``'s loss per epoch), in order."""
    metrics: dict[str, float] = field(default_factory=dict)
    """``val_auc``, ``val_accuracy``, ``val_log_loss`` on the validation split."""
    model: Any = None
    failure: tuple[str, str] | None = None
    diverged_at: int | None = None
    """The epoch at which the loss stopped being finite (a ``divergence`` failure)."""


class SplitError(ValueError):
    """The stratified split refuses the rows (a target with a single class, or too few of one)."""


_CACHE: OrderedDict[tuple[Any, ...], FitResult] = OrderedDict()
_LOCK = threading.Lock()
_FIT_LOCK = threading.Lock()


def cache_key(
    digest: str, target: str, algorithm: str, hyperparams: dict[str, Any], seed: int, task: str = "binary"
) -> tuple[Any, ...]:
    return (digest, target, algorithm, json.dumps(hyperparams, sort_keys=True, default=str), seed, task)


def cached(key: tuple[Any, ...]) -> FitResult | None:
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
        return hit


def real_fit(
    data: bytes,
    key: str,
    target: str,
    algorithm: str,
    hyperparams: dict[str, Any],
    seed: int,
    *,
    digest: str,
    task: str = "binary",
    column: str | None = None,
) -> FitResult:
    """The trainer job's fit of ``algorithm`` with ``hyperparams`` on the object ``key``'s bytes ``data``
    (kept by ``digest``, a digest of those bytes), for the trainer's ``task`` (what the dataset's kind
    declares as its ``fit_task``). Raises :class:`SplitError` when the split refuses the rows; a fit that
    fails returns its failure."""
    return _kept(
        cache_key(digest, target, algorithm, hyperparams, seed, task + ":" + (column or "")),
        lambda: _fit(
            trainer.parse_table(data, key),
            target,
            algorithm,
            hyperparams,
            seed,
            epochs=True,
            task=task,
            column=column,
        ),
    )


def real_fit_frame(
    frame: Any, target: str, algorithm: str, hyperparams: dict[str, Any], seed: int, *, digest: str
) -> FitResult:
    """The training flow's fit (its ``train`` task: one ``fit`` call, no epoch loop) on a pandas frame."""
    return _kept(
        cache_key("flow:" + digest, target, algorithm, hyperparams, seed),
        lambda: _fit(frame, target, algorithm, hyperparams, seed, epochs=False),
    )


def _kept(ck: tuple[Any, ...], compute: Callable[[], FitResult]) -> FitResult:
    hit = cached(ck)
    if hit is not None:
        return hit
    store = fitstore.current()
    result = store.get(ck) if store is not None else None
    if not isinstance(result, FitResult):
        result = compute()
        if store is not None:
            store.put(ck, result)
    with _LOCK:
        _CACHE[ck] = result
        while len(_CACHE) > KEPT:
            _CACHE.popitem(last=False)
    return result


def _fit(
    table: Any,
    target: str,
    algorithm: str,
    hyperparams: dict[str, Any],
    seed: int,
    *,
    epochs: bool,
    task: str = "binary",
    column: str | None = None,
) -> FitResult:
    from threadpoolctl import threadpool_limits

    if task in trainer.OWN_LEARNERS:
        with _FIT_LOCK, threadpool_limits(limits=1), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _fit_own(table, target, algorithm, hyperparams, seed, task, column)
    try:
        x_train, x_val, y_train, y_val = trainer.split(table, target, seed, task)
    except ValueError as e:
        raise SplitError(f"ValueError: {e}") from None
    rows: dict[str, Any] = {
        "train_rows": len(x_train),
        "val_rows": len(x_val),
        "features": int(x_train.shape[1]),
    }
    try:
        pipeline = trainer.make_pipeline(x_train, algorithm, hyperparams, seed, task)
    except ValueError as e:  # an algorithm the task has not
        return FitResult(**rows, failure=("invalid_hyperparameter", str(e)))
    lines: list[str] = []
    # One fit at a time, single-threaded: the simulator's CPU is one core, and BLAS/OpenMP threads of
    # two fits would only contend.
    with _FIT_LOCK, threadpool_limits(limits=1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if epochs:
                trainer.fit(pipeline, x_train, y_train, say=lines.append)
            else:
                pipeline.fit(x_train, y_train)
        except trainer.TrainingDiverged:
            epoch_lines = tuple(line for line in lines if line.startswith("epoch "))
            return FitResult(
                **rows, epoch_lines=epoch_lines, failure=("divergence", ""), diverged_at=len(epoch_lines)
            )
        except ValueError as e:
            mode = "missing_values" if "NaN" in str(e) else "invalid_hyperparameter"
            return FitResult(**rows, epoch_lines=tuple(lines), failure=(mode, str(e)))
        except (TypeError, ArithmeticError, MemoryError) as e:
            return FitResult(**rows, epoch_lines=tuple(lines), failure=("invalid_hyperparameter", str(e)))
        metrics = trainer.evaluate(pipeline, x_val, y_val, task)
    pipeline.algorithm = algorithm  # which model server's footprint a replica of it has (sim serving)
    return FitResult(**rows, epoch_lines=tuple(lines), metrics=metrics, model=pipeline)


def _fit_own(
    table: Any,
    target: str,
    algorithm: str,
    hyperparams: dict[str, Any],
    seed: int,
    task: str,
    column: str | None,
) -> FitResult:
    """A task whose module fits (``fit_job``): its metrics and model, or its failure in the calibration's
    failure modes (missing values or documents: ``missing_values``; anything else the libraries refuse:
    ``invalid_hyperparameter``)."""
    import importlib

    learner = importlib.import_module(trainer.OWN_LEARNERS[task])
    rows = len(table)
    val_rows = round(rows * trainer.VALIDATION_FRACTION)
    counts: dict[str, Any] = {"train_rows": rows - val_rows, "val_rows": val_rows, "features": 1}
    try:
        metrics, model = learner.fit_job(table, algorithm, hyperparams, seed, target, column, lambda _: None)
    except (KeyError, TypeError, ValueError, ArithmeticError) as e:
        message = f"{type(e).__name__}: {e}"
        mode = (
            "missing_values"
            if any(w in str(e) for w in ("NaN", "invalid document", "cannot decode image", "same shape"))
            else "invalid_hyperparameter"
        )
        return FitResult(**counts, failure=(mode, message))
    model.algorithm = algorithm
    return FitResult(**counts, metrics=metrics, model=model)


def numeric_columns(model: Any) -> list[str]:
    """The columns a fitted trainer pipeline reads as numbers (the rest as strings)."""
    steps = getattr(model, "named_steps", None)
    if not steps or "preprocess" not in steps:
        return []
    for name, _, columns in steps["preprocess"].transformers_:
        if name == "numeric":
            return [str(c) for c in columns]
    return []


def boolean_columns(model: Any) -> list[str]:
    """The columns a fitted trainer pipeline saw as booleans (one-hot encoded from ``True``/``False``):
    what the real model's signature types ``boolean``."""
    steps = getattr(model, "named_steps", None)
    if not steps or "preprocess" not in steps:
        return []
    pre = steps["preprocess"]
    encoder = getattr(pre, "named_transformers_", {}).get("categorical")
    for name, _, columns in pre.transformers_:
        if name != "categorical" or encoder is None or not hasattr(encoder, "categories_"):
            continue
        return [
            str(c)
            for c, values in zip(columns, encoder.categories_, strict=False)
            if len(values) and getattr(values, "dtype", None) is not None and values.dtype.kind == "b"
        ]
    return []


def clear() -> None:
    """Forget every kept fit (tests, benchmarks measuring fresh fits)."""
    with _LOCK:
        _CACHE.clear()


__all__ = [
    "KEPT",
    "FitResult",
    "SplitError",
    "boolean_columns",
    "cached",
    "clear",
    "numeric_columns",
    "real_fit",
    "real_fit_frame",
]
