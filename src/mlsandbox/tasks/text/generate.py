"""Generate a text classification dataset: training rows with their defects, the hidden holdout and a
manifest of every defect (rows by position in the training file)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from mlsandbox.data.randomness import check_seed, rng_for
from mlsandbox.data.text import TextDataset, generate_text
from mlsandbox.tasks.text.spec import GENERATOR_DOMAIN, TextClassificationDataset

NEW_VOCABULARY: dict[str, dict[str, str]] = {
    "support_tickets": {
        "charged twice": "billed double",
        "invoice": "statement",
        "refund": "reimbursement",
        "subscription price": "membership fee",
        "crashes": "freezes",
        "error code": "fault",
        "syncing": "uploading",
        "very slow": "laggy",
        "log in": "sign in",
        "password reset email": "passcode link",
        "delete my account": "close my profile",
        "email address on my account": "contact info on my profile",
        "package": "parcel",
        "has not arrived": "is still missing",
        "tracking number": "shipment reference",
        "arrived damaged": "came broken",
    },
    "clinical_notes": {
        "lungs are clear": "clear lung fields",
        "normal study": "unremarkable exam",
        "no acute disease": "nothing acute",
        "joint spaces preserved": "joints maintained",
        "consolidation": "opacification",
        "airspace opacity": "alveolar filling",
        "infection likely": "infectious process",
        "infiltrate": "infiltration",
        "pneumonia": "PNA",
        "cortical break": "cortical disruption",
        "lucent line": "lucency",
        "fracture": "fx",
        "cardiomegaly": "enlarged heart",
        "cardiac silhouette": "heart shadow",
        "cardiac enlargement": "heart enlargement",
        "heart size increased": "heart is large",
    },
}
"""The words the newest documents use for the same things (the vocabulary drift), by domain."""

_START = datetime(2024, 1, 1)
_SPAN_DAYS = 365


@dataclass(frozen=True, eq=False)
class GeneratedTextClassification:
    train: pd.DataFrame
    """``created_at`` (ISO), ``text`` (None when empty), ``label``."""
    holdout: pd.DataFrame
    """``text``, ``label``: true labels, no defect."""
    manifest: dict[str, Any]


def _drifted(
    texts: list[str], domain: str, share: float, rng: np.random.Generator
) -> tuple[list[str], list[int]]:
    table = NEW_VOCABULARY[domain]
    pattern = re.compile("|".join(re.escape(k) for k in sorted(table, key=len, reverse=True)))
    out, rows = list(texts), []
    for i in np.flatnonzero(rng.random(len(texts)) < share).tolist():
        new = pattern.sub(lambda m: table[m.group(0)], texts[i])
        if new != texts[i]:
            out[i] = new
            rows.append(i)
    return out, rows


def generate_text_classification(spec: TextClassificationDataset, seed: int) -> GeneratedTextClassification:
    check_seed(seed)
    base: dict[str, Any] = {
        "domain": GENERATOR_DOMAIN[spec.domain],
        "labels": spec.labels,
        "label_probabilities": spec.label_probabilities,
        "filler_words": spec.filler_words,
        "ambiguity": spec.ambiguity,
        "text_column": spec.text_column,
        "label_column": spec.target,
    }
    train = generate_text(
        TextDataset(name=spec.name, rows=spec.rows, label_noise=spec.label_noise, **base), seed
    )
    held = generate_text(TextDataset(name=f"{spec.name}_holdout", rows=spec.holdout_rows, **base), seed)
    rng = rng_for(seed, spec.name, "text-classification-defects")
    texts: list[str | None] = list(train.table.column(spec.text_column).to_pylist())
    labels = list(train.table.column(spec.target).to_pylist())
    recent_from = round(spec.rows * (1 - spec.recent_share))
    drifted_recent, drift_rows = _drifted(
        [t or "" for t in texts[recent_from:]], spec.domain, spec.drift, rng
    )
    texts[recent_from:] = drifted_recent
    holdout_texts, holdout_drift = _drifted(
        list(held.table.column(spec.text_column).to_pylist()), spec.domain, spec.drift, rng
    )
    seconds = np.sort(rng.integers(0, _SPAN_DAYS * 86_400, size=spec.rows))
    stamps = [(_START + timedelta(seconds=int(s))).isoformat(sep=" ") for s in seconds]

    order = rng.permutation(spec.rows)
    n_empty = round(spec.empty_rate * spec.rows)
    n_cut = round(spec.truncated_rate * spec.rows)
    empty = sorted(order[:n_empty].tolist())
    truncated = sorted(order[n_empty : n_empty + n_cut].tolist())
    for i in empty:
        texts[i] = None
    for i in truncated:
        text = texts[i] or ""
        texts[i] = text[: max(3, int(len(text) * float(rng.uniform(0.1, 0.3))))]
    frame = pd.DataFrame({spec.time_column: stamps, spec.text_column: texts, spec.target: labels})
    n_dup = round(spec.duplicate_rate * spec.rows)
    copies = np.sort(rng.choice(spec.rows, size=n_dup, replace=True)) if n_dup else np.zeros(0, dtype=int)
    if n_dup:
        frame = pd.concat([frame, frame.iloc[copies]]).sort_values(spec.time_column, kind="stable")
        frame = frame.reset_index(drop=True)
    holdout = pd.DataFrame(
        {spec.text_column: holdout_texts, spec.target: held.table.column(spec.target).to_pylist()}
    )
    manifest = {
        "generator": "text_classification",
        "dataset": spec.name,
        "seed": seed,
        "domain": spec.domain,
        "rows": len(frame),
        "labels": spec.label_set(),
        "label_noise_rows": train.manifest["label_noise_rows"],
        "ambiguous_rows": len(train.manifest["ambiguous_rows"]),
        "duplicates": int(n_dup),
        "empty_documents": len(empty),
        "truncated_documents": len(truncated),
        "drift": {
            "recent_from": stamps[recent_from] if recent_from < spec.rows else None,
            "recent_drifted_documents": len(drift_rows),
            "holdout_drifted_documents": len(holdout_drift),
            "new_vocabulary": NEW_VOCABULARY[spec.domain] if spec.drift else {},
        },
        "holdout_rows": spec.holdout_rows,
    }
    return GeneratedTextClassification(train=frame, holdout=holdout, manifest=manifest)


__all__ = ["NEW_VOCABULARY", "GeneratedTextClassification", "generate_text_classification"]
