"""Generate a text classification dataset: training rows with their defects, the hidden holdout and a
manifest of every defect (rows by position in the training file)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from mlsandbox.data.randomness import check_seed, rng_for
from mlsandbox.data.text import _SLOTS, TextDataset, _fill, _pseudo_words, generate_text
from mlsandbox.tasks.text.spec import GENERATOR_DOMAIN, TextClassificationDataset

NEW_WORDING: dict[str, dict[str, list[str]]] = {
    "support_tickets": {
        "billing": [
            "{greeting} got billed double on my statement for {product}. {closing}",
            "{greeting} still waiting on the reimbursement of {n} dollars. {closing}",
            "{greeting} the membership fee for {product} jumped without notice. {closing}",
        ],
        "technical": [
            "{greeting} {product} freezes as soon as it starts. {closing}",
            "{greeting} fault {n} pops up while uploading to {product}. {closing}",
            "{greeting} {product} is laggy and unusable lately. {closing}",
        ],
        "account": [
            "{greeting} I can't sign in, the passcode link never shows up. {closing}",
            "{greeting} close my profile and erase everything. {closing}",
            "{greeting} how can I update the contact info on my profile? {closing}",
        ],
        "shipping": [
            "{greeting} my parcel with {product} is still missing after {n} days. {closing}",
            "{greeting} the shipment reference for {product} shows nothing. {closing}",
            "{greeting} {product} came broken, the box was crushed. {closing}",
        ],
    },
    "clinical_notes": {
        "normal": [
            "Exam: clear lung fields, unremarkable. Assessment: nothing acute.",
            "Exam: heart and mediastinum unremarkable. Assessment: negative.",
            "Exam: {site} intact, joints maintained. Assessment: negative.",
        ],
        "pneumonia": [
            "Exam: opacification of the {site}. Assessment: PNA.",
            "Exam: alveolar filling in the {site}. Assessment: infectious process.",
            "Exam: infiltration of the {site}. Assessment: likely PNA.",
        ],
        "fracture": [
            "Exam: cortical disruption of the {site}, displaced. Assessment: acute fx.",
            "Exam: lucency across the {site}. Assessment: nondisplaced fx.",
            "Exam: {site} in several fragments. Assessment: fx, ortho consult.",
        ],
        "cardiomegaly": [
            "Exam: heart shadow enlarged, CTR {pct}%. Assessment: enlarged heart.",
            "Exam: heart is large, prominent {site}. Assessment: enlarged heart.",
            "Exam: heart enlargement with mild congestion. Assessment: enlarged heart.",
        ],
    },
}
"""How the newest documents are worded, by domain and label: the same things said in other words (the
vocabulary drift). A drifted document is rewritten from these for its true label."""

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
    labels: list[str], spec: TextClassificationDataset, fillers: list[str], rng: np.random.Generator
) -> tuple[dict[int, str], list[int]]:
    """New-wording documents for a ``spec.drift`` share of ``labels`` (position: text, with the usual
    filler words appended) and the positions."""
    wording = NEW_WORDING[spec.domain]
    rows = np.flatnonzero(rng.random(len(labels)) < spec.drift).tolist()
    out = {}
    for i in rows:
        options = wording[labels[i]]
        text = _fill(options[int(rng.integers(len(options)))], _SLOTS, rng)
        if spec.filler_words:
            picked = rng.integers(0, len(fillers), size=spec.filler_words)
            text += " " + " ".join(fillers[int(k)] for k in picked)
        out[i] = text
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
    true_labels = list(labels)
    noisy = zip(train.manifest["label_noise_rows"], train.manifest["true_labels_of_noisy_rows"], strict=True)
    for i, label in noisy:
        true_labels[i] = label
    fillers = _pseudo_words(rng_for(seed, spec.name, "fillers"), 500)
    recent, drift_rows = _drifted(true_labels[recent_from:], spec, fillers, rng)
    for i, text in recent.items():
        texts[recent_from + i] = text
    holdout_texts = list(held.table.column(spec.text_column).to_pylist())
    holdout_labels = list(held.table.column(spec.target).to_pylist())
    rewritten, holdout_drift = _drifted(holdout_labels, spec, fillers, rng)
    for i, text in rewritten.items():
        holdout_texts[i] = text
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
    holdout = pd.DataFrame({spec.text_column: holdout_texts, spec.target: holdout_labels})
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
            "new_wording": {lab: NEW_WORDING[spec.domain][lab] for lab in spec.label_set()}
            if spec.drift
            else {},
        },
        "holdout_rows": spec.holdout_rows,
    }
    return GeneratedTextClassification(train=frame, holdout=holdout, manifest=manifest)


__all__ = ["NEW_WORDING", "GeneratedTextClassification", "generate_text_classification"]
