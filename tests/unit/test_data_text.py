"""Text: labels learnable from the words, controllable vocabulary, ground truth of the noise."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression

from mlsandbox.data import TextDataset, from_bytes, generate_text, to_bytes


@pytest.mark.parametrize("domain", ["service_logs", "support_tickets", "medical_reports"])
def test_labels_are_learnable_from_a_bag_of_words(domain: str) -> None:
    spec = TextDataset(name="t", domain=domain, rows=3000, filler_words=3, ambiguity=0.1, label_noise=0.05)  # type: ignore[arg-type]
    g = generate_text(spec, 1)
    df = from_bytes(to_bytes(g.table, "jsonl"), "jsonl")
    train, test = df.iloc[:2000], df.iloc[2000:]
    vec = CountVectorizer().fit(train["text"])
    model = LogisticRegression(max_iter=1000).fit(vec.transform(train["text"]), train["label"])
    accuracy = model.score(vec.transform(test["text"]), test["label"])
    chance = max(g.manifest["label_counts"].values()) / spec.rows
    assert accuracy > 0.75 > chance + 0.3, (accuracy, chance)
    assert len(g.manifest["label_noise_rows"]) == pytest.approx(0.05 * 3000, abs=40)


def test_vocabulary_is_controllable_and_output_deterministic() -> None:
    spec = TextDataset(
        name="logs",
        domain="service_logs",
        rows=200,
        labels=["ok", "timeout"],
        vocabulary={"service": ["zeta-svc"]},
    )
    g = generate_text(spec, 3)
    assert all("zeta-svc" in t for t in g.frame["text"])
    assert set(g.frame["label"]) == {"ok", "timeout"}
    assert to_bytes(generate_text(spec, 3).table, "csv") == to_bytes(g.table, "csv")


def test_bad_text_specs() -> None:
    with pytest.raises(ValidationError, match="labels \\['flu'\\] are not labels of medical_reports"):
        TextDataset(name="m", domain="medical_reports", rows=100, labels=["flu", "normal"])
    with pytest.raises(ValidationError, match="vocabulary slots \\['nope'\\] are unknown or empty"):
        TextDataset(name="m", domain="service_logs", rows=100, vocabulary={"nope": ["x"]})
