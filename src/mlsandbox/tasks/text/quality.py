"""What ``check_data_quality`` reports for a labelled text column, and the preparation steps that fix it.

The profile: rows, label counts, empty documents, duplicated rows and texts labelled two ways, document
lengths and the short ones, and the vocabulary drift (terms frequent among the newest rows and rare
before). Steps (each returns the new frame and what it changed; the input is never modified):

* ``drop_empty``: drop rows whose text is missing or blank (and rows without a label);
* ``dedupe``: drop repeated (text, label) rows, then every row of a text labelled more than one way;
* ``drop_short``: drop documents shorter than ``min_chars`` (default: 40 % of the median length).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Literal, get_args

import numpy as np
import pandas as pd

Step = Literal["drop_empty", "dedupe", "drop_short"]
STEPS: tuple[Step, ...] = get_args(Step)
SHORT_SHARE = 0.4
RECENT_SHARE = 0.2
_WORD = re.compile(r"[a-z][a-z]+")


def _blank(texts: pd.Series) -> pd.Series:
    return texts.isna() | (texts.fillna("").astype(str).str.strip() == "")


def _terms(texts: pd.Series) -> Counter[str]:
    counts: Counter[str] = Counter()
    for text in texts.fillna("").astype(str):
        counts.update(set(_WORD.findall(text.lower())))
    return counts


def profile(
    frame: pd.DataFrame, text_column: str, label_column: str, time_column: str | None
) -> dict[str, Any]:
    """The data-quality profile of a text classification table."""
    missing = [c for c in (text_column, label_column) if c not in frame.columns]
    if missing:
        raise KeyError(f"columns {missing} are not in the data (columns: {list(frame.columns)})")
    texts, labels = frame[text_column], frame[label_column]
    blank = _blank(texts)
    lengths = texts[~blank].astype(str).str.len()
    median = float(lengths.median()) if len(lengths) else 0.0
    pairs = frame[[text_column, label_column]][~blank]
    labels_per_text = pairs.groupby(text_column)[label_column].nunique()
    out: dict[str, Any] = {
        "rows": len(frame),
        "label_counts": {str(k): int(v) for k, v in labels.value_counts().sort_index().items()},
        "missing_labels": int(labels.isna().sum()),
        "empty_documents": int(blank.sum()),
        "duplicate_rows": int(pairs.duplicated().sum()),
        "texts_with_conflicting_labels": int((labels_per_text > 1).sum()),
        "length_chars": {
            "p5": float(np.percentile(lengths, 5)) if len(lengths) else None,
            "median": median,
            "p95": float(np.percentile(lengths, 95)) if len(lengths) else None,
        },
        "short_documents": int((lengths < SHORT_SHARE * median).sum()),
        "short_examples": texts[~blank][lengths < SHORT_SHARE * median].astype(str).head(3).tolist(),
    }
    out["vocabulary_drift"] = _drift(frame, text_column, time_column)
    return out


def _drift(frame: pd.DataFrame, text_column: str, time_column: str | None) -> dict[str, Any] | None:
    """Terms in at least 1 % of the newest fifth's documents and at least 5 times rarer before."""
    if time_column is None or time_column not in frame.columns or len(frame) < 50:
        return None
    ordered = frame.sort_values(time_column, kind="stable")
    cut = int(len(ordered) * (1 - RECENT_SHARE))
    old, new = ordered.iloc[:cut], ordered.iloc[cut:]
    old_terms, new_terms = _terms(old[text_column]), _terms(new[text_column])
    rising = []
    for term, count in new_terms.items():
        share_new = count / len(new)
        share_old = old_terms.get(term, 0) / max(len(old), 1)
        if share_new >= 0.01 and share_new >= 5 * share_old:
            rising.append((share_new, term))
    rising.sort(reverse=True)
    return {
        "newest_rows_from": str(new[time_column].iloc[0]),
        "rising_terms": [t for _, t in rising[:10]],
        "rising_share_of_documents": round(
            float(
                new[text_column]
                .fillna("")
                .str.lower()
                .str.contains("|".join(t for _, t in rising[:10]) or "^$")
                .mean()
            ),
            3,
        ),
    }


def prepare(
    frame: pd.DataFrame, step: Step, *, text_column: str, label_column: str, min_chars: int | None = None
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Apply one preparation ``step``; returns the new frame (fresh 0..n-1 index) and what changed."""
    if step == "drop_empty":
        keep = ~_blank(frame[text_column]) & frame[label_column].notna()
        out = frame.loc[keep]
        return out.reset_index(drop=True), {"rows_removed": len(frame) - len(out)}
    if step == "dedupe":
        once = frame.drop_duplicates([text_column, label_column])
        per_text = once.groupby(text_column)[label_column].transform("nunique")
        out = once.loc[per_text.fillna(1) <= 1]
        return out.reset_index(drop=True), {
            "duplicates_removed": len(frame) - len(once),
            "conflicting_removed": len(once) - len(out),
        }
    if step == "drop_short":
        lengths = frame[text_column].fillna("").astype(str).str.len()
        present = lengths[lengths > 0]
        threshold = int(min_chars if min_chars is not None else SHORT_SHARE * float(present.median() or 0))
        out = frame.loc[lengths >= threshold]
        return out.reset_index(drop=True), {"rows_removed": len(frame) - len(out), "min_chars": threshold}
    raise ValueError(f"unknown preparation step {step!r}; choose one of {list(STEPS)}")


__all__ = ["STEPS", "Step", "prepare", "profile"]
