"""Loading a skops model for grading without importing PyTorch, and without breaking a process that uses it.

The thread-scoped import blocker is tested on a package made for the test; the real ``skops.io`` and
``torch`` are tested in fresh interpreters (each test's own process state), where PyTorch is installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlsandbox.backends.common.mlflow_tracking import _ThreadImportBlocker


@pytest.fixture
def heavy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package name importable from ``tmp_path`` and not imported yet."""
    name = f"heavy_pkg_{id(tmp_path)}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("VALUE = 42\n")
    (tmp_path / name / "sub.py").write_text("from . import VALUE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for mod in [m for m in sys.modules if m.split(".")[0] == name]:
        del sys.modules[mod]


def test_blocker_refuses_only_in_the_registered_thread_and_only_while_active(heavy: str) -> None:
    blocker = _ThreadImportBlocker(frozenset({heavy}))
    other: dict[str, Any] = {}

    def import_elsewhere() -> None:
        try:
            other["value"] = importlib.import_module(heavy).VALUE
        except Exception as e:  # recorded for the assertion below
            other["error"] = e

    try:
        with blocker.active():
            with pytest.raises(ModuleNotFoundError, match=heavy) as err:
                importlib.import_module(f"{heavy}.sub")
            assert err.value.name == f"{heavy}.sub" or err.value.name == heavy
            assert heavy not in sys.modules  # a refused import leaves nothing behind
            thread = threading.Thread(target=import_elsewhere)
            thread.start()
            thread.join(timeout=30)
            assert other == {"value": 42}  # another thread imports it meanwhile
            del sys.modules[heavy]
            with pytest.raises(ModuleNotFoundError):
                importlib.import_module(heavy)
        # after the block: the same thread imports it, submodules included
        assert importlib.import_module(f"{heavy}.sub").VALUE == 42
    finally:
        if blocker in sys.meta_path:
            sys.meta_path.remove(blocker)


def test_blocker_stays_installed_once_and_inert(heavy: str) -> None:
    blocker = _ThreadImportBlocker(frozenset({heavy}))
    try:
        for _ in range(3):
            with blocker.active():
                pass
        assert sys.meta_path.count(blocker) == 1
        assert blocker.threads == set()
        assert importlib.import_module(heavy).VALUE == 42
    finally:
        if blocker in sys.meta_path:
            sys.meta_path.remove(blocker)


def _run(code: str, *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None


needs_torch = pytest.mark.skipif(
    not _torch_installed(), reason="PyTorch is not installed: nothing for the blocker to keep out"
)

LOAD = r"""
import json, sys
if sys.argv[3] == "torch-first":
    import torch
    before = torch
import numpy as np
from mlsandbox.backends.common.mlflow_tracking import _load_local_model, _warm_model_loading
warmed = {}
if sys.argv[3] == "warm":  # what register_model starts: the imports in a background thread
    import threading
    _warm_model_loading()
    for t in threading.enumerate():
        if t.name == "mlsandbox-warm-model-loading":
            t.join()
    warmed = {"warmed_skops": "skops.io" in sys.modules, "warmed_flavor": "mlflow.sklearn" in sys.modules,
              "torch_after_warm": "torch" in sys.modules}
model = _load_local_model(sys.argv[1])
proba = model.predict_proba(np.load(sys.argv[2]))[:, 1].tolist()
out = {"proba": proba, "torch_after_load": "torch" in sys.modules, "skops": "skops.io" in sys.modules, **warmed}
if sys.argv[3] == "torch-first":
    import sklearn.externals.array_api_compat.torch as compat
    out["same_torch"] = sys.modules["torch"] is before
    out["compat_ok"] = compat.asarray([1.0, 2.0]).sum().item() == 3.0
else:
    import torch  # PyTorch works after the load, in this thread and in the sklearn shim
    import sklearn.externals.array_api_compat.torch as compat
    out["torch_later"] = float(torch.ones(3).sum())
    out["compat_ok"] = compat.asarray([1.0, 2.0]).sum().item() == 3.0
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[float]]:
    """A small pipeline saved as the trainer saves it (skops, its own types trusted), its inputs and
    its predictions. ``skops.io`` is imported here the way the grading imports it (no PyTorch)."""
    import numpy as np

    from mlsandbox.backends.common.mlflow_tracking import _import_skops_without_torch

    _import_skops_without_torch()
    import mlflow.sklearn
    import skops.io
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 4))
    y = (x[:, 0] + rng.normal(size=200) > 0).astype(int)
    model = make_pipeline(StandardScaler(), GradientBoostingClassifier(n_estimators=10, random_state=0))
    model.fit(x, y)
    trusted = sorted(skops.io.get_untrusted_types(data=skops.io.dumps(model)))
    root = tmp_path_factory.mktemp("skops-model")
    path, inputs = root / "model", root / "x.npy"
    mlflow.sklearn.save_model(model, str(path), serialization_format="skops", skops_trusted_types=trusted)
    np.save(inputs, x)
    return path, inputs, model.predict_proba(x)[:, 1].tolist()


@pytest.mark.slow  # two fresh interpreters, PyTorch imported in each
@needs_torch
def test_skops_model_loads_without_importing_torch_and_torch_works_after(
    saved_model: tuple[Path, Path, list[float]],
) -> None:
    path, x, expected = saved_model
    out = _run(LOAD, str(path), str(x), "fresh")
    assert out["proba"] == expected  # the same model, the same predictions
    assert out["skops"] is True
    assert out["torch_after_load"] is False  # the load did not import PyTorch
    assert out["torch_later"] == 3.0
    assert out["compat_ok"] is True


@pytest.mark.slow
@needs_torch
def test_registration_warms_the_model_loading_imports_without_torch(
    saved_model: tuple[Path, Path, list[float]],
) -> None:
    path, x, expected = saved_model
    out = _run(LOAD, str(path), str(x), "warm")
    assert out["warmed_skops"] is True and out["warmed_flavor"] is True
    assert out["torch_after_warm"] is False and out["torch_after_load"] is False
    assert out["proba"] == expected


@pytest.mark.slow
@needs_torch
def test_a_process_that_imported_torch_first_keeps_it(saved_model: tuple[Path, Path, list[float]]) -> None:
    path, x, expected = saved_model
    out = _run(LOAD, str(path), str(x), "torch-first")
    assert out["proba"] == expected
    assert out["same_torch"] is True
    assert out["compat_ok"] is True


def test_an_unloadable_skops_model_fails_as_mlflow_fails(
    saved_model: tuple[Path, Path, list[float]], tmp_path: Path
) -> None:
    """The same exception, type and message, as mlflow's own load for a corrupt model file."""
    import shutil

    import mlflow.sklearn

    from mlsandbox.backends.common.mlflow_tracking import _load_local_model

    path, _, _ = saved_model
    broken = tmp_path / "broken"
    shutil.copytree(path, broken)
    (broken / "model.skops").write_bytes(b"not a skops archive")
    errors = []
    for load in (_load_local_model, mlflow.sklearn.load_model):
        with pytest.raises(Exception) as err:
            load(str(broken))
        errors.append((type(err.value), str(err.value)))
    assert errors[0] == errors[1]


def test_a_skops_model_loads_with_the_same_predictions(saved_model: tuple[Path, Path, list[float]]) -> None:
    import numpy as np

    from mlsandbox.backends.common.mlflow_tracking import _load_local_model

    path, inputs, expected = saved_model
    assert _load_local_model(str(path)).predict_proba(np.load(inputs))[:, 1].tolist() == expected
