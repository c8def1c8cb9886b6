"""The sim fit store: real fits kept on disk, shared by processes, bounded, refused where unsafe."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mlsandbox.backends.sim import fitstore, realfit
from mlsandbox.backends.sim.fitstore import FitStore

CSV = b"a,b,y\n" + b"".join(f"{i % 7},{(i * 13) % 11},{int(i % 7 > 2)}\n".encode() for i in range(300))


def test_put_then_get_round_trips_and_counts(tmp_path: Path) -> None:
    store = FitStore(tmp_path / "fits")
    key = ("csv:abc", "y", "logistic_regression", "{}", 7, "binary:")
    assert store.get(key) is None
    store.put(key, {"auc": 0.8})
    assert store.get(key) == {"auc": 0.8}
    assert (store.hits, store.misses, store.writes) == (1, 1, 1)
    assert store.get((*key[:-1], "multiclass:")) is None  # another key is another fit
    assert store.size()[0] == 1
    assert oct((tmp_path / "fits").stat().st_mode & 0o777) == "0o700"


def test_the_file_name_carries_the_libraries_and_the_trainer_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FitStore(tmp_path)
    key = ("csv:abc", "y", "random_forest", "{}", 7, "binary:")
    before = store.path(key)
    monkeypatch.setattr(fitstore, "_FINGERPRINT", "another-version")
    assert store.path(key) != before


def test_a_torn_file_is_dropped_and_read_as_a_miss(tmp_path: Path) -> None:
    store = FitStore(tmp_path)
    key = ("k",)
    store.put(key, [1, 2, 3])
    path = store.path(key)
    path.write_bytes(path.read_bytes()[:5])
    assert store.get(key) is None
    assert not path.exists()


def test_a_directory_others_may_write_to_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(PermissionError, match="writable by it alone"):
        FitStore(shared)
    # configure refuses it the same way and falls back to memory only
    assert fitstore.configure(str(shared)) is None
    assert fitstore.current() is None
    fitstore.configure(None)


def test_the_store_stays_under_its_bound_least_recently_read_first(tmp_path: Path) -> None:
    store = FitStore(tmp_path, max_bytes=10_000)
    blob = b"x" * 3000
    for i in range(6):
        store.put((i,), blob)
        os.utime(store.path((i,)), (1000 + i, 1000 + i))  # written in order, long ago
    os.utime(store.path((0,)))  # the oldest is read again: it stays
    assert store.prune() > 0
    _files, total = store.size()
    assert total <= 10_000 * 0.9
    assert store.get((0,)) == blob
    assert store.get((1,)) is None  # the least recently read went first
    assert store.get((5,)) == blob


def test_off_means_no_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(fitstore.STORE_ENV, "off")
    assert fitstore.default_directory() is None
    monkeypatch.setenv(fitstore.STORE_ENV, str(tmp_path))
    assert fitstore.default_directory() == str(tmp_path)
    monkeypatch.delenv(fitstore.STORE_ENV)
    monkeypatch.setenv("MLSANDBOX_HOME", str(tmp_path / "home"))
    assert fitstore.default_directory() == str(tmp_path / "home" / "sim-fits")


def test_a_fit_done_in_one_process_is_read_by_another_unchanged(tmp_path: Path) -> None:
    """The real fit in a child process, kept on disk; this process reads it instead of fitting, and the
    metrics and the model's predictions are those of the fit."""
    child = textwrap.dedent(
        f"""
        import json, sys
        from mlsandbox.backends.sim import fitstore, realfit
        fitstore.configure({str(tmp_path)!r})
        fit = realfit.real_fit(sys.stdin.buffer.read(), "t.csv", "y", "random_forest",
                               {{"n_estimators": 5}}, 7, digest="csv:test")
        print(json.dumps(fit.metrics))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", child], input=CSV, capture_output=True, check=True, timeout=120
    )
    import json

    metrics = json.loads(out.stdout)
    store = fitstore.configure(str(tmp_path))
    assert store is not None and store.size()[0] == 1
    realfit.clear()
    fit = realfit.real_fit(CSV, "t.csv", "y", "random_forest", {"n_estimators": 5}, 7, digest="csv:test")
    assert store.hits == 1 and store.writes == 0  # read back, not fitted again
    assert fit.metrics == metrics
    realfit.clear()
    fitstore.configure(None)
    fresh = realfit.real_fit(CSV, "t.csv", "y", "random_forest", {"n_estimators": 5}, 7, digest="csv:test")
    assert fresh.metrics == metrics
    import pandas as pd

    rows = pd.DataFrame({"a": [1, 5, 6], "b": [2, 3, 9]})
    assert (fit.model.predict_proba(rows) == fresh.model.predict_proba(rows)).all()
    realfit.clear()
