"""The dataset spec of the text classification kind: support tickets or clinical notes, and their defects.

The signal is the wording of each label (see :mod:`mlsandbox.data.text`); ``ambiguity`` is the share of
documents worded like another label (an error no model can avoid). The defects an engineer has to notice:

* ``label_noise``: a share of training labels is wrong;
* ``duplicate_rate``: rows exported twice;
* ``empty_rate``: documents with no text at all (missing in the file);
* ``truncated_rate``: documents cut off after a few words;
* ``drift``: the vocabulary changes: the newest ``recent_share`` of the training rows and the hidden
  holdout use new words for the same things (``bill`` for ``invoice``, ``PNA`` for ``pneumonia``) in this
  share of their documents.

The hidden holdout is written like the newest rows, without label noise or any other defect.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mlsandbox.data.spec import _check_name
from mlsandbox.data.text_templates import LABEL_TEMPLATES as _LABELS

Domain = Literal["support_tickets", "clinical_notes"]
GENERATOR_DOMAIN: dict[str, Literal["support_tickets", "medical_reports"]] = {
    "support_tickets": "support_tickets",
    "clinical_notes": "medical_reports",
}
"""The text generator's domain of each kind's domain."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TextClassificationDataset(_Model):
    kind: Literal["text_classification"] = "text_classification"
    name: str = Field(max_length=30)
    domain: Domain
    rows: int = Field(default=3000, ge=200, le=500_000)
    holdout_rows: int = Field(default=1000, ge=100, le=200_000)
    labels: list[str] | None = None
    """A subset of the domain's labels (default: all)."""
    label_probabilities: list[float] | None = None
    ambiguity: float = Field(default=0.05, ge=0, lt=0.5)
    filler_words: int = Field(default=4, ge=0, le=50)
    label_noise: float = Field(default=0.0, ge=0, lt=0.5)
    duplicate_rate: float = Field(default=0.0, ge=0, le=0.5)
    empty_rate: float = Field(default=0.0, ge=0, le=0.3)
    truncated_rate: float = Field(default=0.0, ge=0, le=0.5)
    drift: float = Field(default=0.0, ge=0, le=1)
    recent_share: float = Field(default=0.2, gt=0, le=0.5)
    formats: list[Literal["csv", "parquet", "jsonl"]] = Field(default_factory=lambda: ["csv"], min_length=1)  # type: ignore[arg-type]
    text_column: str = "text"
    target: str = "label"
    time_column: str = "created_at"

    _names = field_validator("name", "text_column", "target", "time_column")(_check_name)

    @model_validator(mode="after")
    def _consistent(self) -> TextClassificationDataset:
        known = list(_LABELS[GENERATOR_DOMAIN[self.domain]])
        labels = self.labels or known
        unknown = sorted(set(labels) - set(known))
        if unknown:
            raise ValueError(f"labels {unknown} are not labels of {self.domain}: {known}")
        if len(labels) < 2:
            raise ValueError("at least two labels are needed")
        p = self.label_probabilities
        if p is not None and (len(p) != len(labels) or any(x <= 0 for x in p) or abs(sum(p) - 1) > 1e-6):
            raise ValueError(f"label_probabilities must be {len(labels)} positive numbers summing to 1")
        columns = [self.text_column, self.target, self.time_column]
        if len(set(columns)) != len(columns):
            raise ValueError(f"text_column, target and time_column must differ: {columns}")
        if self.empty_rate + self.truncated_rate > 0.6:
            raise ValueError(
                "empty_rate and truncated_rate together must leave most documents whole (<= 0.6)"
            )
        return self

    def label_set(self) -> list[str]:
        return list(self.labels or _LABELS[GENERATOR_DOMAIN[self.domain]])


__all__ = ["GENERATOR_DOMAIN", "Domain", "TextClassificationDataset"]
