"""Workloads that never use PyTorch keep it out of their process (skops would import it: ~500 MiB)."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = """
import sys
from mlsandbox.workloads.trainer import block_torch
assert block_torch() is True
try:
    import torch
except ModuleNotFoundError as e:
    assert "not used by this workload" in str(e), e
else:
    raise AssertionError("torch was imported")
import skops.io  # walks every scikit-learn module, the one that imports torch included
from sklearn.linear_model import LogisticRegression
import numpy as np
model = LogisticRegression().fit(np.array([[0.0], [1.0]]), [0, 1])
loaded = skops.io.loads(skops.io.dumps(model), trusted=skops.io.get_untrusted_types(data=skops.io.dumps(model)))
assert loaded.predict(np.array([[1.0]]))[0] == 1
assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules), "torch in sys.modules"
print("ok")
"""


def test_block_torch_keeps_skops_working_without_importing_torch() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"


def test_block_torch_does_nothing_once_torch_is_imported() -> None:
    code = (
        "import sys, types; sys.modules['torch'] = types.ModuleType('torch');"
        "from mlsandbox.workloads.trainer import block_torch, _ImportBlocker;"
        "assert block_torch() is False;"
        "assert not any(isinstance(f, _ImportBlocker) for f in sys.meta_path); print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_flow_runs_keep_torch_out_only_when_the_sandbox_says_so() -> None:
    """The sandbox sets MLSANDBOX_NO_TORCH=1 for its flow runs; importing the flows elsewhere blocks nothing."""
    code = (
        "import importlib.util, sys, mlsandbox.workloads.flows as f\n"
        "from mlsandbox.workloads.trainer import _ImportBlocker\n"
        "print(any(isinstance(x, _ImportBlocker) for x in sys.meta_path))"
    )
    env = {k: v for k, v in os.environ.items() if k != "MLSANDBOX_NO_TORCH"}
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert plain.returncode == 0 and plain.stdout.strip() == "False", plain.stderr[-2000:]
    flagged = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "MLSANDBOX_NO_TORCH": "1"},
    )
    assert flagged.returncode == 0 and flagged.stdout.strip() == "True", flagged.stderr[-2000:]
