"""From the sweep's records to the calibration the ``sim`` backend ships.

Every job and fit record is joined with what the simulator will compute on the same rows (its proxy
model's validation and holdout AUC, the rows' features: :mod:`mlsandbox.backends.sim.proxy`), then:

- **AUC**: per algorithm, the real AUC minus the proxy's (validation and holdout) as a ridge regression
  on the rows' features and the hyperparameters (the schema's ``AucModel``). Alternatives are measured
  beside it by cross-validation grouped by table (the proxy alone, a constant per algorithm and
  hyperparameters, the rows' features without the proxy): :func:`compare_auc_models`.
- **resources**: the fit's CPU time (log-linear in rows, width and hyperparameters, from the in-process
  fits, one thread), the process overhead in CPU and wall time (the job's figure minus its fit's), the
  peak memory (the jobs' cgroup high-water marks in rows, shifted to the limit at which the kernel
  really kills the job: the out-of-memory sweep), where in its run an out-of-memory kill happens and
  what the job had printed by then.
- **failures**: exit codes, when they happen, the CPU burnt meanwhile and the captured log tails as
  templates (machine paths replaced by ``{site_packages}``/``{package_dir}``, values by placeholders).
- **divergence**: the learning rate from which ``mlp`` diverges and the epoch it does, the loss curve of
  runs that converge.
- **serving**: service time per request and the feature lookup from the low-rate latencies, replica
  start and memory; **flows**: pick-up time, task durations, CPU-seconds and the captured log lines.

What the sweep does not measure (service operations, environments, client error texts) is kept from the
calibration it starts from (the shipped one), and the metadata says so.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import re
import site
import statistics
import sysconfig
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from mlsandbox.calibration import records as R
from mlsandbox.calibration import texts
from mlsandbox.calibration.datasets import prepare
from mlsandbox.calibration.model import Calibration, LinearModel
from mlsandbox.calibration.plan import TRAINER_DEFAULTS, DataRef, FitPoint, FlowPoint, JobPoint, ServingPoint
from mlsandbox.calibration.shipped import default_path
from mlsandbox.data.clean import Strategy

REBUILD_COMMAND = "mlsandbox calibrate"
"""The command that rebuilds the shipped calibration (the full sweep, resumable, then this fit)."""

AUC_TERMS: tuple[str, ...] = (
    "one",
    "proxy_val_auc",
    "missing_fraction",
    "rows_with_missing_fraction",
    "outlier_fraction",
    "log10_rows",
    "positive_rate",
)
CPU_TERMS: tuple[str, ...] = ("one", "log10_rows", "onehot_width")
RIDGE = 1e-3


# ---------------------------------------------------------------------------------------------- samples


@dataclass
class Sample:
    """A job or fit record with the simulator's view of the same rows."""

    kind: str
    algorithm: str
    hyperparams: dict[str, Any]
    group: str
    """The table the rows come from (scenario, dataset, source batches): the unit of cross-validation."""
    features: dict[str, float]
    proxy_val_auc: float
    proxy_holdout_auc: float
    val_auc: float | None
    holdout_auc: float | None
    fit_cpu_s: float | None
    record: R.Record


@lru_cache(maxsize=512)
def _proxy(ref: DataRef, cleaning: tuple[Strategy, ...]) -> tuple[dict[str, float], float, float]:
    """(features, proxy validation AUC, proxy holdout AUC) of the rows a point trains on."""
    from mlsandbox.backends.sim.proxy import auc, feature_summary, fit_proxy

    prepared = prepare(ref, cleaning)
    frame, target = prepared.frame, prepared.target
    features = feature_summary(frame, target)
    try:
        proxy = fit_proxy(frame, target, seed=ref.seed, validation_fraction=0.2)
    except ValueError:
        return features, float("nan"), float("nan")
    hold = prepared.holdout
    x, y = hold.drop(columns=[target]), hold[target].to_numpy()
    return features, proxy.val_auc, auc(y, proxy.model.predict_proba(x)[:, 1])


def _group(ref: DataRef) -> str:
    return f"{ref.scenario}/{ref.dataset}/{ref.source or ''}{list(ref.batches or ())}/{ref.rows or ''}"


def samples(recs: Iterable[R.Record]) -> list[Sample]:
    """Every successful job and fit record as a :class:`Sample` (failures carry no AUC)."""
    out: list[Sample] = []
    for rec in recs:
        point, result = rec.point, rec.result
        if not isinstance(point, FitPoint | JobPoint) or result.get("state") != "succeeded":
            continue
        if isinstance(point, JobPoint) and point.purpose not in (
            "base",
            "hyperparams",
            "cleaning",
            "size",
            "cpus",
        ):
            continue
        features, proxy_val, proxy_hold = _proxy(point.data, point.cleaning)
        if not (math.isfinite(proxy_val) and math.isfinite(proxy_hold)):
            continue
        features = dict(features)
        if isinstance(point, JobPoint):
            features.update(
                cpus=point.cpus, threads=max(1, math.floor(point.cpus)), memory_mb=point.memory_mb
            )
            fit_cpu = (result.get("in_process") or {}).get("fit_cpu_s")
        else:
            features.update(cpus=1.0, threads=1.0, memory_mb=0.0)
            fit_cpu = result.get("fit_cpu_s")
        metrics = result.get("metrics") or {}
        out.append(
            Sample(
                kind=point.kind,
                algorithm=point.algorithm,
                hyperparams=dict(point.hyperparams),
                group=_group(point.data),
                features=features,
                proxy_val_auc=proxy_val,
                proxy_holdout_auc=proxy_hold,
                val_auc=metrics.get("val_auc"),
                holdout_auc=result.get("holdout_auc"),
                fit_cpu_s=fit_cpu,
                record=rec,
            )
        )
    return out


# ------------------------------------------------------------------------------------------ regression


def hp_value(sample_hp: dict[str, Any], name: str, defaults: dict[str, float]) -> float:
    value = sample_hp.get(name, defaults.get(name))
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float(defaults.get(name, 1.0))


def term_value(s: Sample, term: str, defaults: dict[str, float]) -> float:
    if term == "one":
        return 1.0
    if term == "proxy_val_auc":
        return s.proxy_val_auc
    if term.startswith("log10_hp:"):
        return math.log10(max(1e-12, hp_value(s.hyperparams, term.split(":", 1)[1], defaults)))
    if term.startswith("hp:"):
        return hp_value(s.hyperparams, term.split(":", 1)[1], defaults)
    return float(s.features.get(term, 0.0))


def hp_terms(points: list[Sample], algorithm: str) -> list[str]:
    """``log10_hp:<name>`` for every numeric hyperparameter the sweep varied for ``algorithm``."""
    names = sorted(
        {
            k
            for s in points
            if s.algorithm == algorithm
            for k, v in s.hyperparams.items()
            if isinstance(v, int | float) and v > 0 and k in TRAINER_DEFAULTS[algorithm]
        }
    )
    return [f"log10_hp:{k}" for k in names]


@dataclass
class Linear:
    terms: list[str]
    coef: np.ndarray
    residual_sd: float
    r2: float
    points: int
    mae: float
    log: bool = False

    def predict(self, rows: np.ndarray) -> np.ndarray:
        eta = rows @ self.coef
        return np.exp(eta) if self.log else eta

    def to_model(self, **extra: Any) -> dict[str, Any]:
        model: dict[str, Any] = {
            "intercept": float(self.coef[self.terms.index("one")]) if "one" in self.terms else 0.0,
            "coefficients": {
                t: round(float(c), 6) for t, c in zip(self.terms, self.coef, strict=True) if t != "one"
            },
            "residual_sd": round(self.residual_sd, 6),
        }
        if self.log:
            model["link"] = "log"
        return {**model, **extra}

    def quality(self, note: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "points": self.points,
            "r2": round(self.r2, 4),
            "residual_sd": round(self.residual_sd, 6),
            "mean_abs_error": round(self.mae, 6),
        }
        if note:
            out["note"] = note
        return out


def least_squares(x: np.ndarray, y: np.ndarray, ridge: float = RIDGE) -> np.ndarray:
    """Ridge least squares (the intercept, the first column when it is all ones, is not penalised)."""
    penalty = ridge * np.eye(x.shape[1])
    if x.shape[1] and np.allclose(x[:, 0], 1.0):
        penalty[0, 0] = 0.0
    return np.asarray(np.linalg.solve(x.T @ x + penalty, x.T @ y))


def fit_linear(
    points: list[Sample],
    value: Callable[[Sample], float | None],
    terms: list[str],
    defaults: dict[str, float],
    *,
    log: bool = False,
) -> Linear | None:
    rows, ys = [], []
    for s in points:
        v = value(s)
        if v is None or not math.isfinite(v) or (log and v <= 0):
            continue
        rows.append([term_value(s, t, defaults) for t in terms])
        ys.append(math.log(v) if log else v)
    if len(rows) < max(3, len(terms)):
        return None
    x, y = np.array(rows), np.array(ys)
    # Terms that do not vary (besides the intercept) carry nothing: left out, so the solve stays stable.
    keep = [j for j, t in enumerate(terms) if t == "one" or float(np.ptp(x[:, j])) > 1e-12]
    x = x[:, keep]
    kept = [terms[j] for j in keep]
    coef = least_squares(x, y)
    resid = y - x @ coef
    dof = max(1, len(y) - len(kept))
    sd = float(math.sqrt(float((resid**2).sum()) / dof))
    ss = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss if ss > 0 else 1.0
    pred = x @ coef
    mae = float(np.mean(np.abs((np.exp(pred) - np.exp(y)) if log else resid)))
    return Linear(kept, coef, sd, r2, len(y), mae, log)


def rows_of(points: list[Sample], terms: list[str], defaults: dict[str, float]) -> np.ndarray:
    return np.array([[term_value(s, t, defaults) for t in terms] for s in points])


# ---------------------------------------------------------------------------------- AUC: the comparison


@dataclass
class AucComparison:
    """Holdout-AUC error of each candidate surrogate, cross-validated by table."""

    errors: dict[str, list[float]] = field(default_factory=dict)
    agreement: dict[str, list[bool]] = field(default_factory=dict)

    def summary(self) -> dict[str, dict[str, float]]:
        out = {}
        for name, errs in self.errors.items():
            a = np.abs(np.array(errs))
            agree = self.agreement.get(name, [])
            out[name] = {
                "points": float(a.size),
                "median_abs": float(np.median(a)) if a.size else float("nan"),
                "p90_abs": float(np.percentile(a, 90)) if a.size else float("nan"),
                "threshold_agreement": float(np.mean(agree)) if agree else float("nan"),
            }
        return out


THRESHOLDS = (0.7, 0.72, 0.75)
"""The goals' minimum AUCs in the catalog: a surrogate must put a model on the same side of them."""


def _boosted_delta(points: list[Sample], terms: list[str], defaults: dict[str, float]) -> Any:
    """A gradient-boosted correction on the same features (a non-linear alternative, measured only: the
    schema holds linear corrections)."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    usable = [s for s in points if s.holdout_auc is not None]
    if len(usable) < 20:
        return None
    y = np.array([float(s.holdout_auc) - s.proxy_holdout_auc for s in usable])  # type: ignore[arg-type]
    model = HistGradientBoostingRegressor(max_iter=100, max_depth=3, learning_rate=0.1, random_state=0)
    return model.fit(rows_of(usable, terms, defaults), y)


def compare_auc_models(points: list[Sample], folds: int = 5) -> AucComparison:
    """Grouped cross-validation of the holdout AUC: train each candidate on the other tables, predict this
    one. Candidates: ``proxy+delta`` (the schema's model: proxy plus a linear correction, capped at the
    proxy as the simulator's noise can only lower an AUC), ``proxy+delta uncapped``, ``proxy+boosted
    delta`` (a gradient-boosted correction on the same features, capped), ``proxy`` (no correction),
    ``constant`` (the mean per algorithm and hyperparameters) and ``features`` (a linear model of the
    rows' features without the proxy)."""
    comparison = AucComparison()
    usable = [s for s in points if s.holdout_auc is not None]
    groups = sorted({s.group for s in usable})
    fold_of = {g: i % folds for i, g in enumerate(groups)}
    for k in range(folds):
        train = [s for s in usable if fold_of[s.group] != k]
        test = [s for s in usable if fold_of[s.group] == k]
        if not train or not test:
            continue
        for algorithm in TRAINER_DEFAULTS:
            tr = [s for s in train if s.algorithm == algorithm]
            te = [s for s in test if s.algorithm == algorithm]
            defaults = TRAINER_DEFAULTS[algorithm]
            hp = hp_terms(tr, algorithm)
            terms = [*AUC_TERMS, *hp]
            if len(tr) <= len(terms) or not te:
                continue
            delta = fit_linear(tr, lambda s: s.holdout_auc - s.proxy_holdout_auc, terms, defaults)  # type: ignore[operator]
            direct_terms = [t for t in terms if t != "proxy_val_auc"]
            direct = fit_linear(tr, lambda s: s.holdout_auc, direct_terms, defaults)
            means: dict[str, list[float]] = defaultdict(list)
            for s in tr:
                means[json.dumps(s.hyperparams, sort_keys=True)].append(float(s.holdout_auc))  # type: ignore[arg-type]
            overall = float(np.mean([float(s.holdout_auc) for s in tr]))  # type: ignore[arg-type]
            boosted = _boosted_delta(tr, terms, defaults)
            for s in te:
                real = float(s.holdout_auc)  # type: ignore[arg-type]
                preds: dict[str, float] = {"proxy": s.proxy_holdout_auc}
                if delta is not None:
                    d = float(delta.predict(rows_of([s], delta.terms, defaults))[0])
                    preds["proxy+delta"] = s.proxy_holdout_auc + min(0.0, d)
                    preds["proxy+delta uncapped"] = s.proxy_holdout_auc + d
                if direct is not None:
                    preds["features"] = float(direct.predict(rows_of([s], direct.terms, defaults))[0])
                if boosted is not None:
                    d = float(boosted.predict(rows_of([s], terms, defaults))[0])
                    preds["proxy+boosted delta"] = s.proxy_holdout_auc + min(0.0, d)
                key = json.dumps(s.hyperparams, sort_keys=True)
                preds["constant"] = float(np.mean(means[key])) if means.get(key) else overall
                for name, pred in preds.items():
                    comparison.errors.setdefault(name, []).append(pred - real)
                    comparison.agreement.setdefault(name, []).extend(
                        (pred >= t) == (real >= t) for t in THRESHOLDS
                    )
    return comparison


# ---------------------------------------------------------------------------------------------- texts


def _path_prefixes() -> list[tuple[str, str]]:
    """Machine paths in captured texts and their placeholders (longest first)."""
    import mlsandbox

    package_dir = str(Path(mlsandbox.__file__).resolve().parent)
    prefixes = [(package_dir, "{package_dir}")]
    for p in {*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        prefixes.append((str(Path(p)), "{site_packages}"))
    from mlsandbox import paths

    prefixes.append((str(paths.sandboxes_dir()), "{sandbox_dir}"))
    return sorted(prefixes, key=lambda kv: -len(kv[0]))


def template(text: str, replacements: dict[str, str] | None = None) -> str:
    """A captured text as a ``str.format`` template: braces escaped, machine paths replaced by their
    placeholders, then each literal of ``replacements`` (longest first) by its template fragment
    (``{"at epoch 2": "at epoch {epoch}"}``)."""
    out = text.replace("{", "{{").replace("}", "}}")
    for literal, name in _path_prefixes():
        out = out.replace(literal, name)
    for literal, fragment in sorted((replacements or {}).items(), key=lambda kv: -len(kv[0])):
        if literal:
            out = out.replace(literal.replace("{", "{{").replace("}", "}}"), fragment)
    return out


_TRACKER_LINE = re.compile(r"View (run|experiment) ")
"""MLflow's closing lines of a run (links to it): left out of the captured tails, since the simulator does
not fill the tracker's address and the run's id into failure texts."""


def captured(lines: Iterable[str], replacements: dict[str, str] | None = None) -> list[dict[str, Any]]:
    return [{"text": template(line, replacements), "captured": True} for line in lines]


_NORMAL_LINE = re.compile(
    r"^(config from the config store|starting run |reading s3://|loaded \d+ rows|fitting |epoch \d+/\d+ loss=|"
    r"fitted in |val_auc=|val_accuracy=|val_log_loss=|logging model to MLflow)"
)


def tail_after_normal(lines: list[str]) -> list[str]:
    """The lines of a failed job's log after the last line a normal run also prints (without MLflow's
    links to the run)."""
    last = -1
    for i, line in enumerate(lines):
        if _NORMAL_LINE.match(line):
            last = i
    return [line for line in lines[last + 1 :] if line.strip() and not _TRACKER_LINE.search(line)]


# ------------------------------------------------------------------------------------------ the builder


def _median(values: Iterable[float | None], default: float) -> float:
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return float(statistics.median(xs)) if xs else default


def _jobs(recs: list[R.Record], purposes: tuple[str, ...]) -> list[tuple[JobPoint, dict[str, Any]]]:
    out = []
    for r in recs:
        if isinstance(r.point, JobPoint) and r.point.purpose in purposes:
            out.append((r.point, r.result))
    return out


class Builder:
    """Fits each part of the calibration document from the records (see the module docstring)."""

    def __init__(self, recs: list[R.Record], base: dict[str, Any]) -> None:
        self.recs = recs
        self.doc = json.loads(json.dumps(base))
        self.notes: list[str] = []
        self.report: dict[str, Any] = {}
        self.samples = samples(recs)

    # -------------------------------------------------------------------------------------- AUC, CPU
    def auc_and_cpu(self) -> None:
        for algorithm, defaults in TRAINER_DEFAULTS.items():
            pts = [s for s in self.samples if s.algorithm == algorithm]
            alg = self.doc["jobs"]["algorithms"][algorithm]
            alg["defaults"] = dict(defaults)
            quality = dict(alg.get("fit_quality") or {})
            terms = [*AUC_TERMS, *hp_terms(pts, algorithm)]
            val = fit_linear(
                pts, lambda s: None if s.val_auc is None else s.val_auc - s.proxy_val_auc, terms, defaults
            )
            hold = fit_linear(
                pts,
                lambda s: None if s.holdout_auc is None else s.holdout_auc - s.proxy_holdout_auc,
                terms,
                defaults,
            )
            if val is not None:
                alg["auc"]["val_delta"] = val.to_model()
                quality["auc.val_delta"] = val.quality()
            if hold is not None:
                alg["auc"]["holdout_delta"] = hold.to_model()
                quality["auc.holdout_delta"] = hold.quality()
            cpu = fit_linear(
                pts, lambda s: s.fit_cpu_s, [*CPU_TERMS, *hp_terms(pts, algorithm)], defaults, log=True
            )
            if cpu is not None:
                alg["resources"]["fit_cpu_s"] = cpu.to_model(minimum=0.005)
                quality["resources.fit_cpu_s"] = cpu.quality("the fit alone, one thread, in-process")
            alg["fit_quality"] = quality
        comparison = compare_auc_models(self.samples).summary()
        self.report["auc_comparison"] = comparison
        for name, figures in comparison.items():
            self.notes.append(
                f"holdout AUC, cross-validated by table, {name}: median |error| {figures['median_abs']:.4f}, "
                f"p90 {figures['p90_abs']:.4f}, same side of the goals' thresholds "
                f"{100 * figures['threshold_agreement']:.1f}% ({int(figures['points'])} points)"
            )
        agreement = [(s.record.result.get("in_process") or {}) for s in self.samples if s.kind == "job"]
        diffs = [
            abs(float(a["holdout_auc"]) - float(s.holdout_auc))
            for a, s in zip(agreement, [s for s in self.samples if s.kind == "job"], strict=True)
            if a.get("holdout_auc") is not None and s.holdout_auc is not None
        ]
        if diffs:
            self.report["jobs_vs_in_process_max_abs_holdout_auc"] = max(diffs)
            self.notes.append(
                f"jobs and the same pipeline fitted in-process on the same rows: largest holdout AUC "
                f"difference {max(diffs):.2e} over {len(diffs)} jobs"
            )

    # ---------------------------------------------------------------------------------- job resources
    def resources(self) -> None:
        ok = [
            (p, r)
            for p, r in _jobs(self.recs, ("base", "hyperparams", "cleaning", "size", "cpus"))
            if r.get("state") == "succeeded"
        ]
        by_alg: dict[str, list[tuple[JobPoint, dict[str, Any]]]] = defaultdict(list)
        for p, r in ok:
            by_alg[p.algorithm].append((p, r))
        loads = [r.load_average_1m for r in self.recs if isinstance(r.point, JobPoint)]
        oom = self._oom_thresholds()
        for algorithm, jobs in by_alg.items():
            res = self.doc["jobs"]["algorithms"][algorithm]["resources"]
            quality = self.doc["jobs"]["algorithms"][algorithm].setdefault("fit_quality", {})
            one_cpu = [(p, r) for p, r in jobs if p.cpus >= 1.0]
            overhead_cpu, overhead_wall, peaks = [], [], []
            for _, r in one_cpu:
                fit_cpu = (r.get("in_process") or {}).get("fit_cpu_s")
                train_s = (r.get("metrics") or {}).get("train_seconds")
                rows = float((r.get("data") or {}).get("rows", 0.0))
                if fit_cpu is not None and r.get("cpu_seconds"):
                    overhead_cpu.append((rows, float(r["cpu_seconds"]) - float(fit_cpu)))
                if train_s is not None and r.get("wall_s"):
                    overhead_wall.append((rows, float(r["wall_s"]) - float(train_s)))
                if r.get("peak_rss_mb"):
                    peaks.append((rows, float(r["peak_rss_mb"])))
            for key, pairs, floor in (
                ("overhead_cpu_s", overhead_cpu, 0.5),
                ("overhead_wall_s", overhead_wall, 0.5),
                ("peak_rss_mb", peaks, 50.0),
            ):
                line = _rows_line(pairs)
                if line is None:
                    continue
                intercept, slope, sd, n = line
                if slope < 0 and key != "peak_rss_mb":
                    # An overhead does not shrink with more rows: a negative slope is the machine's load
                    # changing while the sizes were measured. The median, flat, instead.
                    intercept, slope = _median([y for _, y in pairs], intercept), 0.0
                model = {
                    "intercept": intercept,
                    "coefficients": {"rows": slope},
                    "residual_sd": sd,
                    "minimum": floor,
                }
                if key == "peak_rss_mb" and algorithm in oom:
                    # The kernel kills at the limit: when the free-running high-water mark is not between
                    # the largest limit that killed the job and the smallest it survived, move the line
                    # inside that interval.
                    killed, survived, rows_at = oom[algorithm]
                    predicted = intercept + slope * rows_at
                    inside = min(max(predicted, killed + 4.0), survived - 4.0)
                    if inside != predicted:
                        model["intercept"] = intercept + (inside - predicted)
                        self.notes.append(
                            f"{algorithm}: peak memory line moved by {inside - predicted:+.0f} MiB into the "
                            f"out-of-memory interval measured at {rows_at:.0f} rows ({killed:.0f} MiB killed, "
                            f"{survived:.0f} MiB survived)"
                        )
                    model["residual_sd"] = min(sd, 4.0)
                res[key] = model
                quality[f"resources.{key}"] = {"points": n, "residual_sd": round(sd, 4)}
            half = [(p, r) for p, r in jobs if p.cpus < 1.0 and r.get("wall_s")]
            if half:
                full = _median(
                    [r["wall_s"] for p, r in one_cpu if p.purpose == "base" or p.purpose == "hyperparams"],
                    0.0,
                )
                ratio = _median([r["wall_s"] for _, r in half], 0.0) / full if full else float("nan")
                self.report[f"{algorithm}: wall at 0.5 CPU / at 1 CPU"] = ratio
        if loads:
            self.notes.append(
                f"wall times were measured on a shared machine at a load average of {min(loads):.1f} to "
                f"{max(loads):.1f} (median {statistics.median(loads):.1f}) on 2 cores; CPU-seconds do not "
                "depend on the load, wall times do"
            )

    def _oom_thresholds(self) -> dict[str, tuple[float, float, float]]:
        """Per algorithm: (the largest memory limit that killed it, the smallest it survived, rows)."""
        out: dict[str, tuple[float, float, float]] = {}
        by_alg: dict[str, list[tuple[JobPoint, dict[str, Any]]]] = defaultdict(list)
        for p, r in _jobs(self.recs, ("oom",)):
            by_alg[p.algorithm].append((p, r))
        for algorithm, jobs in by_alg.items():
            killed = [p.memory_mb for p, r in jobs if r.get("exit_code") == 137]
            survived = [p.memory_mb for p, r in jobs if r.get("state") == "succeeded"]
            rows = _median([(r.get("data") or {}).get("rows") for _, r in jobs], 0.0)
            if killed and survived and max(killed) < min(survived):
                out[algorithm] = (float(max(killed)), float(min(survived)), rows)
            self.report[f"{algorithm}: OOM-killed / survived limits (MiB)"] = (
                f"{sorted(killed)} / {sorted(survived)}"
            )
        return out

    def oom(self) -> None:
        """Where a job over its memory is killed: the memory it holds once its libraries are imported (a
        limit below it kills it before it prints anything), and per algorithm where in its run it reaches
        its peak (the last line a job killed just below its peak printed: before the fit, an epoch, or
        after the fit when the model is logged)."""
        jobs = [(p, r) for p, r in _jobs(self.recs, ("oom",)) if r.get("exit_code") == 137]
        if not jobs:
            return
        silent = [p.memory_mb for p, r in jobs if not _printed(r)]
        spoke = [p.memory_mb for p, r in jobs if _printed(r)]
        import_rss = None
        if silent:
            top = max(silent)
            above = [m for m in spoke if m > top]
            import_rss = float((top + min(above)) / 2.0 if above else top + 16.0)
        where: dict[str, float] = {}
        for algorithm in TRAINER_DEFAULTS:
            mine = [(p, r) for p, r in jobs if p.algorithm == algorithm and _printed(r)]
            if mine:
                _, last = max(mine, key=lambda pr: pr[0].memory_mb)
                where[algorithm] = _peak_position((last.get("log") or {}).get("lines") or [])
        fallback = where.get("gradient_boosting", _median(list(where.values()), 0.05))
        for algorithm in TRAINER_DEFAULTS:
            res = self.doc["jobs"]["algorithms"][algorithm]["resources"]
            if import_rss is not None:
                res["import_rss_mb"] = import_rss
            res["oom_at_fraction"] = round(where.get(algorithm, fallback), 3)
        self.report["memory once imported (MiB)"] = import_rss if import_rss is not None else float("nan")
        self.notes.append(
            "out of memory: the last line printed before the kill, by limit: "
            + "; ".join(
                f"{p.algorithm} {p.memory_mb} MiB: {_last_normal((r.get('log') or {}).get('lines') or [])}"
                for p, r in sorted(jobs, key=lambda pr: (pr[0].algorithm, pr[0].memory_mb))
            )
        )
        note = next((n for _, r in jobs for n in (r.get("log") or {}).get("notes", [])), None)
        mode = self.doc["jobs"]["failures"]["out_of_memory"]
        mode.update(exit_code=137, cpu_fraction=round(self._cpu_fraction(jobs), 3))
        if note:
            limit = str(jobs[0][0].memory_mb)
            mode["log_tail"] = captured([note], {f"memory limit {limit} MiB": "memory limit {memory_mb} MiB"})

    def _normal_wall(self) -> dict[str, float]:
        base = _jobs(self.recs, ("base",))
        return {
            a: _median(
                [r.get("wall_s") for p, r in base if p.algorithm == a and r.get("state") == "succeeded"], 0.0
            )
            for a in TRAINER_DEFAULTS
        }

    @staticmethod
    def _cpu_fraction(jobs: list[tuple[JobPoint, dict[str, Any]]]) -> float:
        ratios = [
            float(r["cpu_seconds"]) / float(r["wall_s"])
            for _, r in jobs
            if r.get("wall_s") and float(r["wall_s"]) > 0.2 and r.get("cpu_seconds") is not None
        ]
        return min(1.0, _median(ratios, 1.0))

    # --------------------------------------------------------------------------------------- failures
    def failures(self) -> None:
        failures = self.doc["jobs"]["failures"]
        normal = self._normal_wall()
        specs: dict[str, tuple[str, Callable[[JobPoint, dict[str, Any]], dict[str, str]]]] = {
            "missing_values": ("missing_values", _missing_values_values),
            "divergence": ("divergence", _divergence_values),
            "unknown_hyperparameter": ("unknown_hyperparameter", _detail_values),
            "invalid_hyperparameter": ("invalid_hyperparameter", _detail_values),
            "unreadable_data": ("missing_object", _unreadable_values),
        }
        for mode_name, (purpose, values_of) in specs.items():
            jobs = [(p, r) for p, r in _jobs(self.recs, (purpose,)) if r.get("state") == "failed"]
            if not jobs:
                continue
            point, result = jobs[0]
            lines = (result.get("log") or {}).get("lines") or []
            tail = tail_after_normal(lines)
            mode = failures[mode_name]
            mode["exit_code"] = int(result.get("exit_code") or 1)
            fractions = [
                float(r["wall_s"]) / normal[p.algorithm]
                for p, r in jobs
                if r.get("wall_s") and normal.get(p.algorithm)
            ]
            mode["at_fraction"] = round(min(1.0, _median(fractions, mode.get("at_fraction", 0.3))), 3)
            mode["at_seconds"] = None
            mode["cpu_fraction"] = round(self._cpu_fraction(jobs), 3)
            mode["log_tail"] = captured(tail, values_of(point, result))
            mode["run_status"] = "FAILED" if (result.get("run") or {}).get("status") == "FAILED" else "none"
        timeouts = [(p, r) for p, r in _jobs(self.recs, ("timeout",)) if r.get("exit_code") is not None]
        if timeouts:
            point, result = timeouts[0]
            notes = (result.get("log") or {}).get("notes") or []
            mode = failures["timeout"]
            mode["exit_code"] = int(result["exit_code"])
            mode["cpu_fraction"] = round(self._cpu_fraction(timeouts), 3)
            if notes:
                mode["log_tail"] = captured(
                    notes[:1], {f"after {point.timeout_s:g} s": "after {timeout_s:g} s"}
                )
            mode["run_status"] = "FAILED" if (result.get("run") or {}).get("status") else "none"

    # ------------------------------------------------------------------------------------- divergence
    def divergence(self) -> None:
        jobs = _jobs(self.recs, ("divergence",))
        if not jobs:
            return
        rule = next((d for d in self.doc["jobs"]["divergence"] if d["algorithm"] == "mlp"), None)
        if rule is None:
            return
        diverged: list[tuple[float, int | None]] = []
        converged: list[tuple[float, int | None]] = []
        for p, r in jobs:
            lr = float(p.hyperparams.get("learning_rate_init", 0.01))
            epoch = _diverged_epoch((r.get("log") or {}).get("lines") or [])
            (diverged if epoch is not None else converged).append((lr, epoch))
        for s in self.samples:  # the grid's mlp runs at ordinary rates converge (no divergence there)
            if s.algorithm == "mlp":
                converged.append(
                    (hp_value(s.hyperparams, "learning_rate_init", TRAINER_DEFAULTS["mlp"]), None)
                )
        if diverged:
            low = min(lr for lr, _ in diverged)
            below = [lr for lr, _ in converged if lr < low]
            high_ok = max(below) if below else low / 10.0
            rule["log10_threshold"] = round((math.log10(low) + math.log10(high_ok)) / 2.0, 4)
            rule["scale"] = round(max(0.02, (math.log10(low) - math.log10(high_ok)) / 8.0), 4)
            pairs = [(math.log10(lr), float(e)) for lr, e in diverged if e is not None]
            if len(pairs) >= 2 and len({x for x, _ in pairs}) >= 2:
                xs, es = np.array([x for x, _ in pairs]), np.array([e for _, e in pairs])
                slope, icpt = np.polyfit(xs, es, 1)
                rule["epoch_slope"] = round(float(slope), 4)
                rule["first_epoch"] = round(max(1.0, float(icpt + slope * rule["log10_threshold"])), 3)
            elif pairs:
                rule["first_epoch"] = max(1.0, pairs[0][1])
                rule["epoch_slope"] = 0.0
            self.report["mlp diverges from learning_rate_init"] = 10 ** rule["log10_threshold"]
        losses = [
            _epoch_losses((r.get("log") or {}).get("lines") or [])
            for _, r in _jobs(self.recs, ("base", "size", "cleaning", "hyperparams"))
            if r.get("state") == "succeeded"
        ]
        curves = [c for c in losses if len(c) >= 5 and all(math.isfinite(v) and v > 0 for v in c)]
        if curves:
            rule["initial_loss"] = round(_median([c[0] for c in curves], rule["initial_loss"]), 5)
            decays = [(c[-1] / c[0]) ** (1.0 / (len(c) - 1)) for c in curves]
            rule["loss_decay"] = round(min(1.0, _median(decays, rule["loss_decay"])), 5)

    # ---------------------------------------------------------------------------------- trainer names
    def trainer(self) -> None:
        ok = [
            (p, r) for p, r in _jobs(self.recs, ("base",)) if r.get("state") == "succeeded" and r.get("run")
        ]
        if not ok:
            return
        trainer = self.doc["jobs"]["trainer"]
        point, result = next(((p, r) for p, r in ok if p.algorithm == "gradient_boosting"), ok[0])
        run = result["run"]
        trainer["params"] = sorted(k for k in run["params"] if k not in point.hyperparams)
        trainer["metrics"] = list(run["metric_names"])
        lines = [line for line in (result.get("log") or {}).get("lines", []) if _NORMAL_LINE.match(line)]
        start, after = [], []
        for line in lines:
            if line.startswith("starting run "):
                start.append("starting run {run_name} in experiment {experiment_id}")
            elif line.startswith("reading s3://"):
                start.append("reading s3://{bucket}/{key}")
            elif line.startswith("loaded "):
                start.append(
                    re.sub(
                        r"loaded \d+ rows x \d+ columns",
                        "loaded {rows} rows x {columns} columns",
                        template(line),
                    )
                )
            elif line.startswith("fitting "):
                start.append(
                    re.sub(
                        r"fitting \S+ on \d+ rows \(\d+ held out",
                        "fitting {algorithm} on {train_rows} rows ({val_rows} held out",
                        template(line),
                    )
                )
            elif line.startswith("fitted in "):
                after.append(re.sub(r"fitted in [0-9.]+ s", "fitted in {seconds:.2f} s", template(line)))
            elif line.startswith(("val_auc=", "val_accuracy=", "val_log_loss=")):
                name = line.split("=", 1)[0]
                after.append(f"{name}={{{name}:.4f}}")
            elif line.startswith("logging model"):
                after.append(template(line))
        if start:
            trainer["log"]["start"] = [{"text": t, "captured": True} for t in start]
        if after:
            trainer["log"]["after_fit"] = [{"text": t, "captured": True} for t in after]
        epoch_line = next(
            (
                line
                for _, r in _jobs(self.recs, ("base",))
                for line in (r.get("log") or {}).get("lines", [])
                if line.startswith("epoch ")
            ),
            None,
        )
        if epoch_line is not None:
            trainer["log"]["per_epoch"] = {"text": "epoch {epoch}/{epochs} loss={loss:.6g}", "captured": True}
        # How the overhead splits around the fit is not measured (the log has no timestamps): half before
        # it (interpreter, imports, reading), half after (evaluation, logging the model).
        trainer["log"]["start_fraction"] = 0.5
        starts = [r.get("observed_s", 0.0) - (r.get("wall_s") or 0.0) for _, r in ok if r.get("wall_s")]
        self.doc["jobs"]["queue_start_s"] = round(max(0.0, _median(starts, 0.05)), 4)

    # ------------------------------------------------------------------------------------------ serving
    def serving(self) -> None:
        recs = [
            (r.point, r.result)
            for r in self.recs
            if isinstance(r.point, ServingPoint) and r.result.get("answered")
        ]
        if not recs:
            return
        serving = self.doc["serving"]
        # Figures at the lowest rates, where requests rarely wait for each other: one-row requests by
        # entity (service + lookup), the same by features (service alone), eight rows (per-row cost).
        single = [(p, r) for p, r in recs if p.replicas == 1]
        entity = {p.rate_rps: r for p, r in single if p.by_entity and p.rows_per_request == 1}
        lowest = min(entity)
        p50_entity = float(entity[lowest]["latency_ms"]["p50"])
        by_features = sorted((p.rate_rps, r) for p, r in single if not p.by_entity)
        lookup_ms = 1.0
        if by_features and by_features[0][0] in entity:
            rate, r = by_features[0]
            lookup_ms = max(0.2, float(entity[rate]["latency_ms"]["p50"]) - float(r["latency_ms"]["p50"]))
        many = sorted(
            (p.rate_rps, p.rows_per_request, r) for p, r in single if p.by_entity and p.rows_per_request > 1
        )
        per_row = 0.0
        if many:
            rate, rows, r = many[0]
            near = entity[min(entity, key=lambda x: abs(x - rate))]
            per_row = max(
                0.0, (float(r["latency_ms"]["p50"]) - float(near["latency_ms"]["p50"])) / (rows - 1)
            )
        service = max(0.3, p50_entity - lookup_ms)
        low = entity[lowest]["latency_ms"]
        sd = max(0.0, (float(low["p90"]) - float(low["p50"])) / 1.2816) if low.get("p90") is not None else 0.0
        for algorithm in list(serving["service_ms"]):
            serving["service_ms"][algorithm] = {
                "intercept": round(service, 3),
                "coefficients": {"rows_per_request": round(per_row, 4)},
                "residual_sd": round(sd, 3),
                "minimum": 0.3,
            }
        serving["feature_lookup_ms"] = {"intercept": round(lookup_ms, 3), "minimum": 0.2}
        deploys = [float(r["deploy_s"]) for p, r in single if r.get("deploy_s")]
        if deploys:
            q1, median, q3 = np.percentile(deploys, [25, 50, 75])
            serving["replica_start_s"] = {
                "intercept": round(float(median), 3),
                "residual_sd": round(float(q3 - q1) / 1.349, 3),
                "minimum": 0.5,
            }
        capacity = [
            (p.rate_rps, r["achieved_rps"]) for p, r in single if p.by_entity and p.rows_per_request == 1
        ]
        self.report["serving: answered / offered requests/s (one replica)"] = ", ".join(
            f"{a:.1f}/{o:g}" for o, a in sorted(capacity)
        )
        rss = [
            s.get("memory_mb") for _, r in recs for s in r.get("replica_stats") or [] if s.get("memory_mb")
        ]
        if rss:
            for algorithm in list(serving["replica_rss_mb"]):
                serving["replica_rss_mb"][algorithm] = {"intercept": round(_median(rss, 272.0), 1)}
        self.report["serving: service ms / lookup ms / ms per extra row"] = (
            f"{service:.1f} / {lookup_ms:.1f} / {per_row:.2f}"
        )
        self.notes.append(
            "serving: measured with a gradient-boosting model (every algorithm gets its service time); "
            f"rates {sorted({p.rate_rps for p, _ in recs})} requests/s"
        )

    # -------------------------------------------------------------------------------------------- flows
    def flows(self) -> None:
        recs = [
            (r.point, r.result)
            for r in self.recs
            if isinstance(r.point, FlowPoint) and r.result.get("state_type")
        ]
        if not recs:
            return
        flows = self.doc["flows"]
        pickups = []
        for _, r in recs:
            running = next((s["t"] for s in r["states"] if s["type"] == "RUNNING"), None)
            if running is not None:
                pickups.append(running)
        flows["pickup_s"] = round(_median(pickups, flows["pickup_s"]), 3)
        for name in ("ingestion", "training", "batch-scoring"):
            done = [(p, r) for p, r in recs if p.flow == name and r["state_type"] == "COMPLETED"]
            model = flows["flows"][name]
            if done:
                cpus = [_usage(r) for _, r in done]
                model["cpu_s"] = {"intercept": round(_median(cpus, 1.0), 3), "minimum": 0.05}
                durations = [r.get("duration_s") for _, r in done]
                total = _median(durations, 1.0)
                tasks = model["tasks"]
                if tasks:
                    shares = _task_shares(done[0][1]["logs"], tasks)
                    model["task_s"] = {
                        t: {"intercept": round(max(0.01, total * shares[t]), 3)} for t in tasks
                    }
                logs = _flow_log_templates(done[0][1]["logs"], done[0][0], tasks)
                model["logs"].update({k: v for k, v in logs.items() if v or k == "task_start"})
            failed = [(p, r) for p, r in recs if p.flow == name and r["state_type"] == "FAILED"]
            if failed:
                _p, r = failed[0]
                flow_lines = [
                    _message(line)
                    for line in r["logs"]
                    if " prefect.flow_runs: Finished in state Failed" in line
                ]
                if flow_lines and r.get("message"):
                    detail = str(r["message"]).removeprefix("Flow run encountered an exception: ")
                    kept = [x for x in model["logs"]["failed"] if "Finished in state" not in x["text"]]
                    model["logs"]["failed"] = [*kept, *captured(flow_lines[-1:], {detail: "{detail}"})]
            self.report[f"flow {name}: runs / completed"] = (
                f"{len([1 for p, _ in recs if p.flow == name])} / {len(done)}"
            )

    # -------------------------------------------------------------------------------------------- meta
    def meta(self, sessions: list[R.Session]) -> None:
        quick = any(s.quick for s in sessions)
        kinds: dict[str, int] = defaultdict(int)
        for r in self.recs:
            kinds[r.point.kind] += 1
        first = sessions[0] if sessions else None
        machine = dict(first.machine) if first else {}
        keep = ("cpus", "cpu_model", "reference_ms", "python", "load_average_1m")
        complete = {"job", "fit", "serving", "flow"} <= set(kinds)
        self.doc["meta"] = {
            "schema_version": 1,
            "generator_version": first.generator_version if first else 0,
            "provisional": quick or not complete,
            "source": (
                f"`{REBUILD_COMMAND}`: a sweep of real jobs on the {first.backend if first else 'local'} backend "
                "through the declared Runtime (the trainer workload in cgroups, MinIO, MLflow, Prefect, the "
                "model server), the trainer's own pipeline fitted in-process on the same rows for the AUC grid, "
                "then fitted (mlsandbox.calibration.fit)"
                + (" — a --quick sweep: provisional" if quick else "")
            ),
            "command": REBUILD_COMMAND,
            "created": dt.date.today().isoformat(),
            "machine": {k: machine[k] for k in keep if k in machine},
            "sweep": {
                "jobs": kinds.get("job", 0),
                "fits": kinds.get("fit", 0),
                "serving_points": kinds.get("serving", 0),
                "flow_runs": kinds.get("flow", 0),
                "sessions": len(sessions),
                "sweep_seconds": round(sum(r.elapsed_s for r in self.recs)),
                "sklearn": first.sklearn_version if first else "",
            },
            "notes": [
                *self.notes,
                "not measured by the sweep (kept from the calibration it started from): service operations "
                "and restarts, named environments, the clients' error texts, parallel speed-up above one CPU",
            ],
        }


def _last_normal(lines: list[str]) -> str:
    """The kind of the last ordinary line of a job's log (``loaded``, ``logging model``), or ``nothing``."""
    for line in reversed(lines):
        m = _NORMAL_LINE.match(line)
        if m:
            return m.group(1).split()[0].rstrip("=")
    return "nothing"


def _peak_position(lines: list[str]) -> float:
    """Where in the fit a job reaches its peak memory (the simulator's ``oom_at_fraction``), from the last
    line it printed before the kernel killed it just below that peak."""
    normal = [x for x in lines if _NORMAL_LINE.match(x)]
    if not normal:
        return 0.05
    last = normal[-1]
    m = re.match(r"epoch (\d+)/(\d+) ", last)
    if m:
        return max(0.05, min(1.0, int(m.group(1)) / int(m.group(2))))
    if last.startswith(("fitted in", "val_", "logging model")):
        return 1.0
    return 0.05


def _printed(result: dict[str, Any]) -> bool:
    """Whether a killed job had printed anything of its own before."""
    return any(
        not line.startswith("[mlsandbox]")
        for line in (result.get("log") or {}).get("lines", [])
        if line.strip()
    )


def _rows_line(pairs: list[tuple[float, float]]) -> tuple[float, float, float, int] | None:
    """(intercept, slope per row, residual sd, points) of a robust line through (rows, value) pairs."""
    pairs = [(x, y) for x, y in pairs if math.isfinite(y)]
    if len(pairs) < 3:
        return None
    xs, ys = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    if float(np.ptp(xs)) <= 0:
        return float(np.median(ys)), 0.0, float(np.std(ys)), len(pairs)
    # Least absolute deviations by iteratively reweighted least squares: a few slow outliers (the load of
    # a shared machine) do not pull the line.
    w = np.ones_like(ys)
    coef = np.zeros(2)
    x = np.column_stack([np.ones_like(xs), xs])
    for _ in range(30):
        sw = np.sqrt(w)
        coef = np.linalg.lstsq(x * sw[:, None], ys * sw, rcond=None)[0]
        w = 1.0 / np.maximum(np.abs(ys - x @ coef), 1e-3)
    resid = ys - x @ coef
    sd = float(1.4826 * np.median(np.abs(resid - np.median(resid))))
    return float(coef[0]), float(coef[1]), round(sd, 4), len(pairs)


def _diverged_epoch(lines: list[str]) -> int | None:
    for line in lines:
        m = re.match(r"ERROR training diverged at epoch (\d+)", line)
        if m:
            return int(m.group(1))
    return None


def _epoch_losses(lines: list[str]) -> list[float]:
    out = []
    for line in lines:
        m = re.match(r"epoch \d+/\d+ loss=(\S+)", line)
        if m:
            try:
                out.append(float(m.group(1)))
            except ValueError:
                continue
    return out


def _missing_values_values(point: JobPoint, result: dict[str, Any]) -> dict[str, str]:
    estimator = {"logistic_regression": "LogisticRegression", "mlp": "MLPClassifier"}.get(point.algorithm, "")
    return {estimator: "{estimator}"} if estimator else {}


def _divergence_values(point: JobPoint, result: dict[str, Any]) -> dict[str, str]:
    lines = (result.get("log") or {}).get("lines") or []
    out: dict[str, str] = {}
    for line in lines:
        m = re.match(
            r"ERROR training diverged at epoch (\d+): loss is (\S+) \(learning_rate_init=([^)]+)\)", line
        )
        if m:
            epoch, loss, lr = m.groups()
            out[f"at epoch {epoch}"] = "at epoch {epoch}"
            out[f"loss is {loss}"] = "loss is {loss}"
            out[f"learning_rate_init={lr}"] = "learning_rate_init={learning_rate:g}"
    return out


def _detail_values(point: JobPoint, result: dict[str, Any]) -> dict[str, str]:
    last = (result.get("log") or {}).get("last_line") or ""
    if ": " in last:
        return {last.split(": ", 1)[1]: "{detail}"}
    return {}


def _unreadable_values(point: JobPoint, result: dict[str, Any]) -> dict[str, str]:
    """The client's last line is the detail as a whole (the simulator gives the exception's line)."""
    last = (result.get("log") or {}).get("last_line") or ""
    return {last: "{detail}"} if last else {}


def _usage(result: dict[str, Any]) -> float | None:
    for line in result.get("usage_lines") or []:
        m = re.search(r"cpu_seconds=([0-9.]+)", line)
        if m:
            return float(m.group(1))
    return None


def _message(line: str) -> str:
    """A flow log line without its ``HH:MM:SS LEVEL logger:`` prefix."""
    m = re.match(r"^\d\d:\d\d:\d\d \S+ \S+: (.*)$", line, re.S)
    return m.group(1) if m else line


def _seconds(line: str) -> int | None:
    m = re.match(r"^(\d\d):(\d\d):(\d\d) ", line)
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3)) if m else None


def _task_shares(logs: list[str], tasks: list[str]) -> dict[str, float]:
    """Each task's share of the run, from the log's timestamps (one-second resolution): the run begins at
    its ``Beginning flow run`` line and each task ends at its ``Finished in state`` line (Prefect's task
    logger), in the flow's order; equal shares when the log does not show every task."""
    begin = next((_seconds(line) for line in logs if "Beginning flow run" in line), None)
    ends = [
        _seconds(line)
        for line in logs
        if " prefect.task_runs: Finished in state" in line and _seconds(line) is not None
    ]
    if begin is None or len(ends) < len(tasks):
        return {t: 1.0 / len(tasks) for t in tasks}
    bounds = [begin, *ends[: len(tasks)]]
    spans = [max(0.1, float(b - a)) for a, b in itertools.pairwise(bounds)]  # type: ignore[operator]
    total = sum(spans)
    return {t: s / total for t, s in zip(tasks, spans, strict=True)}


def _flow_log_templates(
    logs: list[str], point: FlowPoint, tasks: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """The moments of a completed run's log as templates (see ``FlowModel``); ``task_start`` is empty
    when the orchestrator logs no line as a task starts (Prefect 3 does not)."""
    out: dict[str, list[dict[str, Any]]] = {
        "start": [],
        "task_start": [],
        "task_end": [],
        "completed": [],
        "usage": [],
    }
    run_name = f"calib-{point.id()}"
    for line in logs:
        msg = _message(line).split("\n", 1)[0]
        if msg.startswith("Beginning flow run"):
            out["start"] = captured(
                [msg], {run_name: "{flow_run_name}", f"for flow '{point.flow}'": "for flow '{flow}'"}
            )
        elif msg.startswith("Created task run") and not out["task_start"]:
            m = re.search(r"Created task run '([a-z-]+)-([0-9a-f]+)' for task '([a-z-]+)'", msg)
            if m:
                out["task_start"] = [
                    {
                        "text": "Created task run '{task}-" + m.group(2) + "' for task '{task}'",
                        "captured": True,
                    }
                ]
        elif msg.startswith("resource usage: cpu_seconds="):
            out["usage"] = [{"text": "resource usage: cpu_seconds={seconds:.3f}", "captured": True}]
    completed = [_message(line) for line in logs if _message(line).startswith("Finished in state Completed")]
    if completed:
        out["completed"] = captured(completed[-1:])
        if tasks:
            out["task_end"] = captured(completed[:1])
    return out


# ---------------------------------------------------------------------------------------------- entry


def base_document() -> dict[str, Any]:
    """What the fit starts from: the shipped calibration (its unmeasured parts are kept)."""
    path = default_path()
    if path.is_file():
        return dict(json.loads(path.read_text()))
    return texts.base_document()


def _task_features(point: JobPoint, task: str, defaults: dict[str, float]) -> dict[str, float]:
    """The features the simulator computes for a job of ``point`` training ``task`` (its rows, limits,
    and the timed algorithm's hyperparameter defaults): the rows' summary over the columns the sim's job
    model reads for that task (``surrogate.modelled_columns``: for a task with a learner of its own, the
    target and the numeric columns, not the dates, documents or images)."""
    from mlsandbox.backends.sim.proxy import as_table, feature_summary
    from mlsandbox.backends.sim.surrogate import modelled_columns

    prepared = prepare(point.data, point.cleaning)
    read = modelled_columns(as_table(prepared.frame), task, prepared.target)
    out = dict(feature_summary(read, prepared.target))
    out.update(one=1.0, cpus=point.cpus, threads=float(max(1, math.floor(point.cpus))))
    out["memory_mb"] = float(point.memory_mb)
    for name, default in defaults.items():
        value = float(point.hyperparams.get(name, default))
        out[f"hp:{name}"] = value
        out[f"log10_hp:{name}"] = math.log10(value) if value > 0 else math.log10(max(default, 1e-12))
    return out


def _timed_as(algorithm: str, algorithms: dict[str, Any]) -> str:
    """The binary algorithm whose calibration a task's algorithm starts from: its namesake, else its
    kind's stand-in (``TaskKind.calibration_stand_ins``), else logistic regression."""
    if algorithm in algorithms:
        return algorithm
    from mlsandbox.tasks.registry import kinds

    for kind in kinds().values():
        if algorithm in kind.calibration_stand_ins:
            return kind.calibration_stand_ins[algorithm]
    return "logistic_regression"


def fit_task_resources(recs: list[R.Record], doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``jobs.tasks`` fitted from the ``kind`` job records (real runs of another kind of work), and a
    report. Per (trainer task, algorithm), starting from the timed binary algorithm's resources (its
    namesake or its kind's stand-in), from the jobs at one CPU: the fit's CPU-seconds keep the timed
    model's dependence on rows, width and hyperparameters, with their level moved to the measured fits'
    (the trainer's own ``train_seconds``, its fit at one CPU; a record without it: the job's CPU-seconds
    less the overhead); the overhead's CPU-seconds (starting, reading, logging) keep that model's
    dependence on rows, with their level moved to the measured jobs' (their CPU-seconds less the fit: a
    task with a learner of its own imports and logs other things than the binary pipeline); the peak
    memory is a line in the rows through the measurements (moved to them when they have fewer than three
    sizes). The features are the ones the sim computes for a job of the task (:func:`_task_features`).
    CPU-seconds and memory do not depend on the machine's load; the overheads' wall time does, and stays
    the timed algorithm's."""
    by: dict[tuple[str, str], list[tuple[JobPoint, dict[str, Any]]]] = defaultdict(list)
    for p, r in _jobs(recs, ("kind",)):
        if r.get("state") == "succeeded" and r.get("task"):
            by[(str(r["task"]), p.algorithm)].append((p, r))
    algorithms = doc["jobs"]["algorithms"]
    tasks: dict[str, Any] = json.loads(json.dumps(doc["jobs"].get("tasks") or {}))
    report: dict[str, Any] = {}
    for (task, algorithm), jobs in sorted(by.items()):
        timed = _timed_as(algorithm, algorithms)
        base = algorithms[timed]
        res = json.loads(json.dumps(base["resources"]))
        defaults = dict(base.get("defaults") or {})
        one_cpu = [
            (r, _task_features(p, task, defaults)) for p, r in jobs if p.cpus >= 1.0 and r.get("cpu_seconds")
        ]
        overhead = LinearModel.model_validate(res["overhead_cpu_s"])
        trained = [(r, x, (r.get("metrics") or {}).get("train_seconds")) for r, x in one_cpu]
        over_gaps = [
            float(r["cpu_seconds"]) - float(t) - overhead.mean(x) for r, x, t in trained if t is not None
        ]
        if over_gaps:
            res["overhead_cpu_s"]["intercept"] = float(
                res["overhead_cpu_s"]["intercept"] + np.median(over_gaps)
            )
            overhead = LinearModel.model_validate(res["overhead_cpu_s"])
        fit_model = res["fit_cpu_s"]
        floor = float(fit_model.get("minimum") or 0.005)
        fit_gaps = []
        for r, x, t in trained:
            fit_cpu = max(float(t) if t is not None else float(r["cpu_seconds"]) - overhead.mean(x), floor)
            rest = sum(c * x.get(f, 0.0) for f, c in fit_model["coefficients"].items())
            fit_gaps.append(math.log(fit_cpu) - rest)
        peaks = [
            (float((r.get("data") or {}).get("rows", 0.0)), float(r["peak_rss_mb"]))
            for _, r in jobs
            if r.get("peak_rss_mb")
        ]
        line = _rows_line(peaks)
        if line is not None:
            intercept, slope, sd, _ = line
            res["peak_rss_mb"] = {
                "intercept": intercept,
                "coefficients": {"rows": slope},
                "link": "identity",
                "residual_sd": sd,
                "minimum": 50.0,
            }
        elif peaks:
            m = res["peak_rss_mb"]
            slope = float(m["coefficients"].get("rows", 0.0))
            m["intercept"] = float(
                m["intercept"] + _median([y - (m["intercept"] + slope * x) for x, y in peaks], 0.0)
            )
        if fit_gaps and fit_model.get("link") == "log":
            center = float(np.median(fit_gaps))
            mad = float(1.4826 * np.median(np.abs(np.asarray(fit_gaps) - center)))
            fit_model.update(
                intercept=center, residual_sd=round(max(mad, float(fit_model.get("residual_sd") or 0.05)), 4)
            )
        tasks.setdefault(task, {})[algorithm] = res
        report[f"{task}/{algorithm}"] = {
            "jobs": len(jobs),
            "timed_as": timed,
            "cpu_seconds_median": _median([float(r.get("cpu_seconds") or 0.0) for _, r in jobs], 0.0),
            "peak_rss_mb_median": _median([float(r.get("peak_rss_mb") or 0.0) for _, r in jobs], 0.0),
            "overhead_cpu_s": round(
                overhead.mean({"rows": _median([x["rows"] for _, x in one_cpu], 0.0)}), 3
            ),
        }
    return tasks, report


def fit_task_section(path: Path, base: dict[str, Any] | None = None) -> tuple[Calibration, dict[str, Any]]:
    """The shipped calibration (or ``base``) with ``jobs.tasks`` fitted from the ``kind`` records at
    ``path`` and nothing else changed (``mlsandbox calibrate --section kinds``)."""
    recs = R.records(path)
    doc = json.loads(json.dumps(base if base is not None else base_document()))
    tasks, report = fit_task_resources(recs, doc)
    if not tasks:
        raise ValueError(f"{path} holds no successful job of another kind of work")
    doc["jobs"]["tasks"] = tasks
    return Calibration.model_validate(doc), report


def fit_calibration(path: Path, base: dict[str, Any] | None = None) -> tuple[Calibration, dict[str, Any]]:
    """The calibration fitted from the records at ``path`` (validated against the schema), and a report
    of its main figures."""
    recs = R.records(path)
    if not recs:
        raise ValueError(f"{path} holds no calibration records")
    builder = Builder(recs, base if base is not None else base_document())
    builder.auc_and_cpu()
    builder.resources()
    builder.oom()
    builder.failures()
    builder.divergence()
    builder.trainer()
    builder.serving()
    builder.flows()
    tasks, task_report = fit_task_resources(recs, builder.doc)
    if tasks:
        builder.doc["jobs"]["tasks"] = tasks
        builder.report["tasks"] = task_report
    builder.meta(R.sessions(path))
    calibration = Calibration.model_validate(builder.doc)
    report: dict[str, Any] = {"records": len(recs), "samples with an AUC": len(builder.samples)}
    for name, figures in (builder.report.pop("auc_comparison", {}) or {}).items():
        report[f"holdout AUC {name}: median |error|"] = figures["median_abs"]
        report[f"holdout AUC {name}: same side of thresholds"] = figures["threshold_agreement"]
    report.update(builder.report)
    return calibration, report


def write_calibration(calibration: Calibration, out: Path | None = None) -> Path:
    """Write the calibration (JSON) to ``out`` or where the package ships it."""
    target = out or default_path(calibration.meta.generator_version)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = calibration.model_dump(mode="json", exclude_none=False)
    if not data["jobs"].get("tasks"):  # a calibration of binary jobs only reads as it did before kinds
        data["jobs"].pop("tasks", None)
    target.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return target


__all__ = [
    "REBUILD_COMMAND",
    "AucComparison",
    "Sample",
    "compare_auc_models",
    "fit_calibration",
    "fit_task_resources",
    "fit_task_section",
    "samples",
    "template",
    "write_calibration",
]
