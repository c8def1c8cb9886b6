"""Text classification, for real: a TF-IDF vectorizer and a linear model (or naive Bayes), scikit-learn.

Algorithms: ``logistic_regression``, ``linear_svc`` and ``naive_bayes`` (``ComplementNB``), each behind
``TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), min_df=2)``. Hyperparameters are spelled as scikit-learn
spells them in a pipeline: the estimator's own names (``C``, ``alpha``), the vectorizer's with the
``tfidf__`` prefix (``tfidf__min_df``). A missing document makes the vectorizer refuse the column with
its own error (``np.nan is an invalid document``). The metric is macro-F1. Heavy imports are deferred;
it imports nothing from mlsandbox, so the trainer job runs it in any image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ALGORITHMS = ("logistic_regression", "linear_svc", "naive_bayes")
VECTORIZER_PREFIX = "tfidf__"
VECTORIZER_PARAMETERS = frozenset(
    ["analyzer", "binary", "lowercase", "max_df", "max_features", "min_df", "ngram_range", "norm",
     "smooth_idf", "stop_words", "strip_accents", "sublinear_tf", "use_idf"]
)  # fmt: skip
"""The vectorizer parameters an action may set (callables and encodings are not data)."""
ESTIMATOR_PARAMETERS: dict[str, frozenset[str]] = {
    "logistic_regression": frozenset(
        ["C", "class_weight", "dual", "fit_intercept", "intercept_scaling", "l1_ratio", "max_iter", "n_jobs",
         "penalty", "random_state", "solver", "tol", "verbose", "warm_start"]
    ),
    "linear_svc": frozenset(
        ["C", "class_weight", "dual", "fit_intercept", "intercept_scaling", "loss", "max_iter", "multi_class",
         "penalty", "random_state", "tol", "verbose"]
    ),
    "naive_bayes": frozenset(["alpha", "class_prior", "fit_prior", "force_alpha", "norm"]),
}  # fmt: skip
"""Each algorithm's estimator parameters as scikit-learn spells them (``get_params()`` of the pinned
version; a unit test holds them equal), kept as data so validating an action imports no scikit-learn."""
VALIDATION_FRACTION = 0.2


def hyperparameter_problems(algorithm: str, hyperparams: dict[str, Any]) -> list[str]:
    """What is wrong with ``hyperparams`` for ``algorithm`` (empty: nothing)."""
    if algorithm not in ESTIMATOR_PARAMETERS:
        return [f"unknown algorithm {algorithm!r} for text classification; choose one of {list(ALGORITHMS)}"]
    problems = []
    own = sorted(k for k in hyperparams if not k.startswith(VECTORIZER_PREFIX))
    unknown = sorted(set(own) - ESTIMATOR_PARAMETERS[algorithm])
    if unknown:
        problems.append(
            f"{algorithm} has no parameter(s) {unknown}; its parameters: {sorted(ESTIMATOR_PARAMETERS[algorithm])}"
        )
    vec = sorted(k[len(VECTORIZER_PREFIX) :] for k in hyperparams if k.startswith(VECTORIZER_PREFIX))
    bad = sorted(set(vec) - VECTORIZER_PARAMETERS)
    if bad:
        problems.append(
            f"the vectorizer has no settable parameter(s) {[VECTORIZER_PREFIX + b for b in bad]}; "
            f"settable: {[VECTORIZER_PREFIX + v for v in sorted(VECTORIZER_PARAMETERS)]}"
        )
    return problems


def make_pipeline(algorithm: str, hyperparams: dict[str, Any], seed: int, text_column: str = "text") -> Any:
    """The vectorizer (reading ``text_column`` of a frame: the model takes rows, as a deployment gets
    them) and the estimator, with ``hyperparams`` set."""
    from sklearn.compose import ColumnTransformer
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import ComplementNB
    from sklearn.pipeline import Pipeline
    from sklearn.svm import LinearSVC

    factories = {
        "logistic_regression": lambda: LogisticRegression(max_iter=1000, random_state=seed),
        "linear_svc": lambda: LinearSVC(random_state=seed),
        "naive_bayes": lambda: ComplementNB(),
    }
    if algorithm not in factories:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {list(ALGORITHMS)}")
    params = {
        f"text__{k}" if k.startswith(VECTORIZER_PREFIX) else f"model__{k}": _tuples(v)
        for k, v in hyperparams.items()
    }
    vectorizer = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), min_df=2)
    pipeline = Pipeline(
        [("text", ColumnTransformer([("tfidf", vectorizer, text_column)])), ("model", factories[algorithm]())]
    )
    return pipeline.set_params(**params)


def _tuples(value: Any) -> Any:
    """JSON has no tuples: ``[1, 2]`` for ``ngram_range`` is ``(1, 2)``."""
    return tuple(value) if isinstance(value, list) else value


def macro_f1(actual: Any, predicted: Any) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(list(actual), list(predicted), average="macro", zero_division=0))


def evaluate(model: Any, frame: Any, text_column: str, label_column: str) -> dict[str, float]:
    """``macro_f1`` and ``accuracy`` of ``model`` on ``frame`` (missing text read as empty)."""
    from sklearn.metrics import accuracy_score

    texts = frame[[text_column]].fillna("").astype(str)
    predicted = model.predict(texts)
    actual = frame[label_column].astype(str).tolist()
    return {"macro_f1": macro_f1(actual, predicted), "accuracy": float(accuracy_score(actual, predicted))}


@dataclass(frozen=True)
class FitOutcome:
    """A real fit: validation metrics and the pipeline fitted on the training split, or how it failed."""

    train_rows: int
    val_rows: int
    metrics: dict[str, float] = field(default_factory=dict)
    model: Any = None
    failure: tuple[str, str] | None = None


def split(frame: Any, label_column: str, seed: int) -> tuple[Any, Any]:
    """Training and validation rows, :data:`VALIDATION_FRACTION` held out, stratified by the label."""
    from sklearn.model_selection import train_test_split

    parts = train_test_split(
        frame, test_size=VALIDATION_FRACTION, random_state=seed, stratify=frame[label_column]
    )
    return parts[0], parts[1]


def fit(
    frame: Any, algorithm: str, hyperparams: dict[str, Any], seed: int, *, text_column: str, label_column: str
) -> FitOutcome:
    """:func:`fit_job` in process (``sim``): the libraries' refusals become the failure (``invalid_data``
    for the documents, ``invalid_hyperparameter`` for the parameters)."""
    rows = len(frame)
    val_rows = round(rows * VALIDATION_FRACTION)
    try:
        metrics, pipeline = fit_job(
            frame, algorithm, hyperparams, seed, label_column, text_column, lambda _: None
        )
    except (KeyError, TypeError, ValueError) as e:
        message = f"{type(e).__name__}: {e}"
        data = isinstance(e, KeyError) or any(
            w in str(e) for w in ("invalid document", "empty vocabulary", "NaN")
        )
        return FitOutcome(
            rows - val_rows, val_rows, failure=("invalid_data" if data else "invalid_hyperparameter", message)
        )
    return FitOutcome(rows - val_rows, val_rows, metrics=metrics, model=pipeline)


def fit_job(
    frame: Any,
    algorithm: str,
    hyperparams: dict[str, Any],
    seed: int,
    target: str,
    column: str | None,
    say: Any = print,
) -> tuple[dict[str, float], Any]:
    """The trainer job's fit: split, fit and validate (raises the libraries' own errors)."""
    text_column = column or "text"
    if text_column not in frame.columns or target not in frame.columns:
        raise KeyError(f"columns {text_column!r} and {target!r} must be in the data: {list(frame.columns)}")
    train, val = split(frame, target, seed)
    say(f"fitting tfidf + {algorithm} on {len(train)} rows ({len(val)} held out for validation) ...")
    pipeline = make_pipeline(algorithm, hyperparams, seed, text_column)
    pipeline.fit(train[[text_column]], train[target].astype(str).to_numpy())
    metrics = {f"val_{k}": round(v, 6) for k, v in evaluate(pipeline, val, text_column, target).items()}
    return metrics, pipeline


__all__ = [
    "ALGORITHMS",
    "ESTIMATOR_PARAMETERS",
    "VECTORIZER_PARAMETERS",
    "FitOutcome",
    "evaluate",
    "fit",
    "fit_job",
    "hyperparameter_problems",
    "macro_f1",
    "make_pipeline",
]
