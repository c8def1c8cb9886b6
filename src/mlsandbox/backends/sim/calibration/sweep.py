"""A small in-process sweep that gives the ``sim`` backend a provisional calibration.

``python -m mlsandbox.backends.sim.calibration.sweep [--out FILE] [--seeds N]`` fits the trainer's own
scikit-learn pipeline (:func:`mlsandbox.workloads.trainer.make_pipeline`, the same split and metrics)
in this process on the built-in scenarios' datasets, raw and after each cleaning strategy, for every
algorithm and a few hyperparameters, and next to it the simulator's proxy model on the same rows. It fits
the AUC corrections and the fit's CPU time from those points; the rest of the calibration (process
overheads, peak memory, serving, flows, service operations, error texts) comes from the figures the
project's benchmarks measured and from the texts the code paths print, and is marked as such.

The result is labelled ``provisional`` in its metadata: ``mlsandbox calibrate`` replaces it with a sweep
of real jobs on the ``local`` backend (processes, MinIO, MLflow), which also captures the texts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CATALOG = Path(__file__).resolve().parents[3] / "scenario" / "catalog"
"""The built-in scenarios (read as files: the backends do not import the scenario layer)."""
SPECS = (
    "tabular-quality-basic",
    "churn-incident-combined",
    "churn-imbalanced-missing",
    "churn-clean-small",
    "data-csv-batch-missing-outliers",
    "data-parquet-schema-change",
)
CLEANINGS: tuple[tuple[str, ...], ...] = (
    (),
    ("impute_median",),
    ("impute_median", "clip_outliers"),
    ("impute_mean",),
    ("drop_na",),
    ("clip_outliers",),
)
CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("logistic_regression", {}),
    ("logistic_regression", {"C": 0.05}),
    ("random_forest", {}),
    ("random_forest", {"max_depth": 5}),
    ("random_forest", {"n_estimators": 30}),
    ("gradient_boosting", {}),
    ("gradient_boosting", {"max_iter": 30}),
    ("gradient_boosting", {"learning_rate": 0.5}),
    ("mlp", {}),
    ("mlp", {"learning_rate_init": 0.001}),
)


@dataclass
class Point:
    spec: str
    seed: int
    cleaning: str
    algorithm: str
    hyperparams: dict[str, Any]
    features: dict[str, float]
    proxy_val_auc: float
    proxy_holdout_auc: float
    val_auc: float | None
    holdout_auc: float | None
    fit_cpu_s: float | None
    error: str | None


def _spec(name: str) -> Any:
    import yaml

    from mlsandbox.data.spec import TabularDataset

    doc = yaml.safe_load((CATALOG / f"{name}.yaml").read_text())
    return TabularDataset.model_validate(doc["datasets"][0])


def run_sweep(seeds: int = 2, progress: bool = True) -> list[Point]:
    """Every (dataset, seed, cleaning, algorithm, hyperparameters) point (see the module docstring)."""
    import pyarrow as pa
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import train_test_split

    from mlsandbox.backends.sim.proxy import auc, feature_summary, fit_proxy
    from mlsandbox.data.clean import clean_frame
    from mlsandbox.data.tabular import generate_tabular
    from mlsandbox.workloads.trainer import VALIDATION_FRACTION, evaluate, fit, make_pipeline

    points: list[Point] = []
    total = len(SPECS) * seeds * len(CLEANINGS) * len(CONFIGS)
    done = 0
    started = time.monotonic()
    for spec_name in SPECS:
        spec = _spec(spec_name)
        for s in range(seeds):
            seed = 1000 * (s + 1) + 7
            data = generate_tabular(spec, seed)
            holdout = data.holdout
            x_hold, y_hold = holdout.drop(columns=[spec.target]), holdout[spec.target].to_numpy()
            for cleaning in CLEANINGS:
                frame = data.train
                for strategy in cleaning:
                    frame, _ = clean_frame(frame, strategy, spec.target)  # type: ignore[arg-type]
                table = pa.Table.from_pandas(frame, preserve_index=False)
                features = feature_summary(table, spec.target)
                proxy = fit_proxy(table, spec.target, seed=seed, validation_fraction=VALIDATION_FRACTION)
                proxy_hold = auc(y_hold, proxy.model.predict_proba(x_hold)[:, 1])
                y = frame[spec.target]
                x = frame.drop(columns=[spec.target])
                x_train, x_val, y_train, y_val = train_test_split(
                    x, y, test_size=VALIDATION_FRACTION, random_state=seed, stratify=y
                )
                for algorithm, hp in CONFIGS:
                    val_auc = hold_auc = cpu = None
                    error = None
                    pipeline = make_pipeline(x, algorithm, hp, seed)
                    t0 = time.process_time()
                    try:
                        with _quiet():
                            fit(pipeline, x_train, y_train)
                        cpu = time.process_time() - t0
                        val_auc = evaluate(pipeline, x_val, y_val)["val_auc"]
                        hold_auc = float(roc_auc_score(y_hold, pipeline.predict_proba(x_hold)[:, 1]))
                    except Exception as e:
                        error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                    points.append(
                        Point(
                            spec_name,
                            seed,
                            "+".join(cleaning) or "raw",
                            algorithm,
                            dict(hp),
                            features,
                            proxy.val_auc,
                            proxy_hold,
                            val_auc,
                            hold_auc,
                            cpu,
                            error,
                        )
                    )
                    done += 1
                    if progress and done % 20 == 0:
                        rate = done / max(1e-9, time.monotonic() - started)
                        print(
                            f"  {done}/{total} fits ({rate:.1f}/s, {(total - done) / rate:.0f} s left)",
                            file=sys.stderr,
                        )
    return points


class _quiet:
    """Silence what the trainer prints per epoch (stdout)."""

    def __enter__(self) -> None:
        self._stdout = sys.stdout
        sys.stdout = open(os.devnull, "w")

    def __exit__(self, *exc: object) -> None:
        sys.stdout.close()
        sys.stdout = self._stdout


# ----------------------------------------------------------------------------------------------- fitting

AUC_TERMS = ("one", "proxy_val_auc", "missing_fraction", "outlier_fraction", "log10_rows", "positive_rate")
CPU_TERMS = ("one", "log10_rows", "onehot_width")


def _hp_terms(algorithm: str) -> list[str]:
    names = sorted({k for a, hp in CONFIGS if a == algorithm for k in hp})
    return [f"log10_hp:{k}" for k in names]


def _row(p: Point, terms: list[str], defaults: dict[str, float]) -> list[float]:
    out = []
    for t in terms:
        if t == "one":
            out.append(1.0)
        elif t == "proxy_val_auc":
            out.append(p.proxy_val_auc)
        elif t.startswith("log10_hp:"):
            name = t.split(":", 1)[1]
            out.append(math.log10(float(p.hyperparams.get(name, defaults[name]))))
        else:
            out.append(p.features[t])
    return out


def least_squares(x: np.ndarray, y: np.ndarray, ridge: float = 1e-3) -> tuple[np.ndarray, float, float]:
    """Ridge least squares: coefficients, residual sd, R²."""
    a = x.T @ x + ridge * np.eye(x.shape[1])
    coef = np.linalg.solve(a, x.T @ y)
    resid = y - x @ coef
    sd = float(resid.std(ddof=min(len(y) - 1, x.shape[1]))) if len(y) > x.shape[1] else 0.0
    ss = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss if ss > 0 else 1.0
    return coef, sd, r2


def fit_linear(
    points: list[Point],
    target: str,
    terms: list[str],
    defaults: dict[str, float],
    *,
    log: bool = False,
) -> dict[str, Any]:
    rows, ys = [], []
    for p in points:
        value = {
            "val_delta": None if p.val_auc is None else p.val_auc - p.proxy_val_auc,
            "holdout_delta": None if p.holdout_auc is None else p.holdout_auc - p.proxy_holdout_auc,
            "fit_cpu_s": p.fit_cpu_s,
        }[target]
        if value is None or (log and value <= 0):
            continue
        rows.append(_row(p, terms, defaults))
        ys.append(math.log(value) if log else value)
    if len(rows) < 3:
        return {"model": {"intercept": float(np.mean(ys)) if ys else 0.0}, "quality": {"points": len(rows)}}
    coef, sd, r2 = least_squares(np.array(rows), np.array(ys))
    x = np.array(rows)
    model: dict[str, Any] = {
        "intercept": float(coef[terms.index("one")]),
        "coefficients": {t: round(float(c), 6) for t, c in zip(terms, coef, strict=True) if t != "one"},
        "residual_sd": round(sd, 6),
        "bounds": {
            t: (round(float(x[:, k].min()), 6), round(float(x[:, k].max()), 6))
            for k, t in enumerate(terms)
            if t != "one"
        },
    }
    if log:
        model["link"] = "log"
    pred = np.array(rows) @ coef
    mae = float(np.mean(np.abs((np.exp(pred) if log else pred) - (np.exp(ys) if log else np.array(ys)))))
    return {
        "model": model,
        "quality": {
            "points": len(rows),
            "r2": round(r2, 4),
            "residual_sd": round(sd, 6),
            "mean_abs_error": round(mae, 6),
        },
    }


TRAINER_DEFAULTS: dict[str, dict[str, float]] = {
    "logistic_regression": {"C": 1.0, "max_iter": 1000.0},
    "random_forest": {"n_estimators": 100.0, "max_depth": 30.0, "min_samples_leaf": 1.0},
    "gradient_boosting": {"max_iter": 100.0, "learning_rate": 0.1, "max_depth": 30.0},
    "mlp": {"learning_rate_init": 0.01, "max_iter": 30.0, "alpha": 0.0001},
}
"""The trainer's defaults of the numeric hyperparameters the models use (``max_depth``: None is treated
as a deep tree)."""


def fitted_algorithms(points: list[Point]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(AUC and fit-CPU models per algorithm, the fit quality of each), from the sweep's points."""
    out: dict[str, Any] = {}
    quality: dict[str, Any] = {}
    for algorithm in ("logistic_regression", "random_forest", "gradient_boosting", "mlp"):
        pts = [p for p in points if p.algorithm == algorithm]
        defaults = TRAINER_DEFAULTS[algorithm]
        hp = _hp_terms(algorithm)
        auc_terms = [*AUC_TERMS, *hp]
        val = fit_linear(pts, "val_delta", auc_terms, defaults)
        hold = fit_linear(pts, "holdout_delta", auc_terms, defaults)
        cpu = fit_linear(pts, "fit_cpu_s", [*CPU_TERMS, *hp], defaults, log=True)
        out[algorithm] = {
            "val_delta": val["model"],
            "holdout_delta": hold["model"],
            "fit_cpu_s": cpu["model"],
        }
        quality[algorithm] = {
            "auc.val_delta": val["quality"],
            "auc.holdout_delta": hold["quality"],
            "resources.fit_cpu_s": cpu["quality"],
        }
    return out, quality


def _machine() -> dict[str, Any]:
    import platform

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count() or 0, "cpu_model": model, "python": platform.python_version()}


def build(points: list[Point]) -> dict[str, Any]:
    """The provisional calibration document from the sweep's points."""
    from mlsandbox.backends.sim.calibration import texts
    from mlsandbox.data.tabular import GENERATOR_VERSION

    fitted, quality = fitted_algorithms(points)
    doc = texts.base_document()
    for algorithm, models in fitted.items():
        alg = doc["jobs"]["algorithms"][algorithm]
        alg["auc"]["val_delta"] = models["val_delta"]
        alg["auc"]["holdout_delta"] = models["holdout_delta"]
        alg["resources"]["fit_cpu_s"] = {**models["fit_cpu_s"], "minimum": 0.005}
        alg["fit_quality"] = quality[algorithm]
    failures = [p for p in points if p.error]
    doc["meta"] = {
        "schema_version": 1,
        "generator_version": GENERATOR_VERSION,
        "provisional": True,
        "source": (
            "provisional: AUC corrections and fit CPU time from an in-process sweep of the trainer's own "
            "scikit-learn pipeline next to the proxy (no processes, no MinIO or MLflow); process "
            "overheads, memory, serving, flows and service timings from the benchmarks' figures; texts "
            "from the code paths that print them. Replace with `mlsandbox calibrate`."
        ),
        "command": "python -m mlsandbox.backends.sim.calibration.sweep",
        "created": dt.date.today().isoformat(),
        "machine": _machine(),
        "sweep": {
            "points": len(points),
            "failed_points": len(failures),
            "datasets": ",".join(SPECS),
            "seeds": len({p.seed for p in points}),
            "cleanings": len(CLEANINGS),
            "configs": len(CONFIGS),
        },
        "notes": [
            "fit CPU seconds are of the fit alone, measured in this process (one thread);",
            "jobs' process overheads (interpreter, imports, MLflow logging) are estimates, not measured here;",
            "no text here was captured from a real job: every template has captured = false.",
        ],
    }
    return doc


def main(argv: list[str] | None = None) -> int:
    from mlsandbox.backends.sim.calibration import default_path
    from mlsandbox.backends.sim.calibration.model import Calibration

    parser = argparse.ArgumentParser(prog="python -m mlsandbox.backends.sim.calibration.sweep")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: the shipped file)")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument(
        "--points", type=Path, default=None, help="also write the sweep's points (JSON lines)"
    )
    args = parser.parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    t0 = time.monotonic()
    try:
        points = run_sweep(args.seeds)
    except Exception:
        traceback.print_exc()
        return 1
    if args.points is not None:
        with args.points.open("w") as f:
            for p in points:
                f.write(json.dumps(p.__dict__, sort_keys=True) + "\n")
    doc = build(points)
    Calibration.model_validate(doc)  # never write a document the simulator cannot read
    out = args.out or default_path()
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out} from {len(points)} points in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
