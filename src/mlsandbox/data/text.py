"""Labelled domain text from templates: service logs, support tickets, medical-style reports.

Each domain has labels; each label has its own message templates (the signal: error signatures, issue
phrases, findings) and every template has slots filled from vocabularies (services, hosts, users, ...)
that any label may use. ``vocabulary`` overrides or extends those slot lists; ``filler_words`` neutral
pseudo-words drawn from a vocabulary of ``filler_vocabulary`` words are appended as noise; ``ambiguity``
is the share of rows written with another label's template (the label is kept: the text misleads);
``label_noise`` flips labels after writing. All recorded in the manifest with the rows touched.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mlsandbox.data.randomness import check_seed, rng_for
from mlsandbox.data.spec import _check_name
from mlsandbox.data.text_templates import LABEL_TEMPLATES

Domain = Literal["service_logs", "support_tickets", "medical_reports"]

_SLOTS: dict[str, list[str]] = {
    "service": ["api-gateway", "billing", "checkout", "auth", "search", "inventory", "notifier"],
    "host": ["db-01", "cache-02", "payments.internal", "queue-3", "storage-eu-1"],
    "user": ["alice", "bob", "carol", "dave", "erin", "frank"],
    "path": ["/var/lib/data", "/tmp/upload", "/srv/cache", "/data/shards"],
    "resource": ["orders", "users", "items", "invoices", "sessions"],
    "product": ["router X2", "plan Pro", "the mobile app", "the desktop client", "order #4411"],
    "greeting": ["Hi,", "Hello,", "Dear support,", "Hi team,", "Good morning,"],
    "closing": ["Thanks.", "Please help.", "Regards.", "Any update appreciated.", ""],
    "site": ["left lower lobe", "right upper lobe", "distal radius", "left ventricle", "right hip"],
}

_LABELS = LABEL_TEMPLATES


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TextDataset(_Model):
    kind: Literal["text"] = "text"
    name: str
    domain: Domain
    rows: int = Field(ge=10, le=2_000_000)
    labels: list[str] | None = None
    """A subset of the domain's labels (default: all)."""
    label_probabilities: list[float] | None = None
    vocabulary: dict[str, list[str]] | None = None
    """Slot word lists replacing the built-in ones (slots: service, host, user, path, resource, product,
    greeting, closing, site)."""
    filler_words: int = Field(default=0, ge=0, le=50)
    filler_vocabulary: int = Field(default=500, ge=10, le=100_000)
    ambiguity: float = Field(default=0.0, ge=0, lt=0.5)
    label_noise: float = Field(default=0.0, ge=0, lt=0.5)
    text_column: str = "text"
    label_column: str = "label"

    _names = field_validator("name", "text_column", "label_column")(_check_name)

    @model_validator(mode="after")
    def _consistent(self) -> TextDataset:
        known = list(_LABELS[self.domain])
        labels = self.labels or known
        unknown = sorted(set(labels) - set(known))
        if unknown:
            raise ValueError(f"labels {unknown} are not labels of {self.domain}: {known}")
        if len(labels) < 2:
            raise ValueError("at least two labels are needed")
        p = self.label_probabilities
        if p is not None and (len(p) != len(labels) or any(x <= 0 for x in p) or abs(sum(p) - 1) > 1e-6):
            raise ValueError(f"label_probabilities must be {len(labels)} positive numbers summing to 1")
        bad = sorted(k for k, v in (self.vocabulary or {}).items() if k not in _SLOTS or not v)
        if bad:
            raise ValueError(f"vocabulary slots {bad} are unknown or empty; slots: {sorted(_SLOTS)}")
        if self.text_column == self.label_column:
            raise ValueError("text_column and label_column must differ")
        return self

    def label_set(self) -> list[str]:
        return list(self.labels or _LABELS[self.domain])


@dataclass(frozen=True, eq=False)
class GeneratedText:
    table: pa.Table
    manifest: dict[str, Any]

    @property
    def frame(self) -> pd.DataFrame:
        return self.table.to_pandas()


def _pseudo_words(rng: np.random.Generator, count: int) -> list[str]:
    letters = np.array(list(string.ascii_lowercase))
    lengths = rng.integers(3, 9, size=count)
    words = ["".join(letters[rng.integers(0, 26, size=k)]) for k in lengths]
    seen: set[str] = set()
    out = []
    for i, w in enumerate(words):
        w = f"{w}{i}" if w in seen else w
        seen.add(w)
        out.append(w)
    return out


def _fill(template: str, slots: dict[str, list[str]], rng: np.random.Generator) -> str:
    values = {name: options[int(rng.integers(len(options)))] for name, options in slots.items()}
    values.update(
        ms=str(int(rng.integers(5, 30_000))),
        n=str(int(rng.integers(1, 5000))),
        pct=str(int(rng.integers(50, 100))),
    )
    return template.format(**values)


def generate_text(spec: TextDataset, seed: int) -> GeneratedText:
    check_seed(seed)
    labels = spec.label_set()
    templates = _LABELS[spec.domain]
    slots = {**_SLOTS, **(spec.vocabulary or {})}
    rng = rng_for(seed, spec.name, "text")
    p = np.asarray(spec.label_probabilities or [1 / len(labels)] * len(labels))
    y = np.minimum(np.searchsorted(np.cumsum(p), rng.random(spec.rows), side="right"), len(labels) - 1)
    written_as = y.copy()
    ambiguous = np.flatnonzero(rng.random(spec.rows) < spec.ambiguity)
    written_as[ambiguous] = (y[ambiguous] + rng.integers(1, len(labels), size=ambiguous.size)) % len(labels)
    fillers = _pseudo_words(rng_for(seed, spec.name, "fillers"), spec.filler_vocabulary)
    texts = []
    for k in written_as.tolist():
        options = templates[labels[k]]
        text = _fill(options[int(rng.integers(len(options)))], slots, rng)
        if spec.filler_words:
            text += " " + " ".join(
                fillers[int(i)] for i in rng.integers(0, len(fillers), size=spec.filler_words)
            )
        texts.append(text)
    flipped = np.flatnonzero(rng.random(spec.rows) < spec.label_noise)
    observed = y.copy()
    observed[flipped] = (y[flipped] + rng.integers(1, len(labels), size=flipped.size)) % len(labels)
    names = np.asarray(labels, dtype=object)
    table = pa.table(
        {
            spec.text_column: pa.array(texts, type=pa.large_string()),
            spec.label_column: pa.array(names[observed].tolist(), type=pa.large_string()),
        }
    )
    manifest = {
        "generator": "text",
        "dataset": spec.name,
        "seed": seed,
        "domain": spec.domain,
        "rows": spec.rows,
        "labels": labels,
        "label_counts": {lab: int((observed == i).sum()) for i, lab in enumerate(labels)},
        "signatures": {lab: templates[lab] for lab in labels},
        "ambiguous_rows": ambiguous.tolist(),
        "label_noise_rows": flipped.tolist(),
        "true_labels_of_noisy_rows": names[y[flipped]].tolist(),
        "filler_words": spec.filler_words,
        "filler_vocabulary": spec.filler_vocabulary,
    }
    return GeneratedText(table=table, manifest=manifest)
