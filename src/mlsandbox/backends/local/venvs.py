"""Named Python environments for jobs: venvs built by uv from pinned requirement sets.

An environment is a venv under ``$MLSANDBOX_HOME/envs/<hash>`` made by ``uv venv`` with the sandbox's own
interpreter and filled by ``uv pip install --link-mode hardlink``: packages come from uv's cache (a few
seconds once cached; the first build of a set downloads it from the package index, and with the index out
of reach the build is retried with ``--offline``). The requirements are the given pins plus what every
job needs (:func:`base_requirements`: MLflow, boto3, pandas, pyarrow, skops). A set that
cannot be resolved fails with uv's own resolution error. Built venvs are content-addressed by their
requirements and shared by every episode (a cache); names are per episode (see the ``compute`` pack).

Jobs run a workload by file path with the environment's interpreter (the workloads are self-contained),
so a model pickled under one scikit-learn and loaded under another meets the library's real behaviour.

:class:`LocalEnvironments` is the local backend's :class:`~mlsandbox.backends.protocols.Environments`;
:func:`interpreter` turns an environment's key into the interpreter jobs, flow runs and replicas use.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlsandbox import paths
from mlsandbox.backends.common.uv import base_requirements, dead_builds, normalise, uv_binary
from mlsandbox.backends.common.uv import install as uv_install
from mlsandbox.backends.common.uv import run as run_uv
from mlsandbox.backends.protocols.environments import (
    DEFAULT_KEY,
    EnvironmentInfo,
    ModelScoreError,
)

_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
_KEY_RE = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True)
class EnvInfo:
    key: str
    path: Path
    requirements: tuple[str, ...]
    packages: dict[str, str]
    build_s: float

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def envs_dir() -> Path:
    return paths.home() / "envs"


def check_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise ValueError(f"invalid environment name {name!r}: use 1-32 lowercase letters, digits and dashes")
    return name


def env_key(requirements: list[str]) -> str:
    blob = json.dumps([sys.version_info[:2], requirements, base_requirements()])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _info(path: Path) -> EnvInfo | None:
    meta = path / "mlsandbox-env.json"
    if not meta.is_file() or not (path / "bin" / "python").exists():
        return None
    d = json.loads(meta.read_text())
    return EnvInfo(d["key"], path, tuple(d["requirements"]), d["packages"], d["build_s"])


def build(requirements: list[str]) -> EnvInfo:
    """The environment for ``requirements`` (built unless it already exists); :class:`EnvironmentBuildError`
    with uv's message when they cannot be resolved or installed."""
    reqs = normalise(requirements)
    key = env_key(reqs)
    path = envs_dir() / key
    found = _info(path)
    if found is not None:
        return found
    uv = uv_binary()
    t0 = time.monotonic()
    _remove_stale_builds()
    tmp = envs_dir() / f".{key}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        python = os.path.realpath(sys.executable)
        run_uv([uv, "venv", "--quiet", "--python", python, str(tmp)], "create the venv")
        install = [uv, "pip", "install", "--quiet", "--python", str(tmp / "bin" / "python")]
        install += ["--link-mode", "hardlink", *reqs, *base_requirements()]
        uv_install(install)
        frozen = run_uv([uv, "pip", "freeze", "--python", str(tmp / "bin" / "python")], "list packages")
        packages = dict(line.split("==", 1) for line in frozen.splitlines() if "==" in line)
        meta = {"key": key, "requirements": reqs, "packages": packages, "build_s": time.monotonic() - t0}
        (tmp / "mlsandbox-env.json").write_text(json.dumps(meta, indent=1))
        try:
            tmp.rename(path)  # venvs are relocatable enough for this: uv writes absolute paths only in
        except OSError:  # scripts, and jobs run `bin/python` directly; another builder may have won
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    info = _info(path)
    assert info is not None
    return info


def _remove_stale_builds() -> None:
    """Half-built venvs of builders that died (``.<key>.<pid>.tmp`` whose process is gone)."""
    for child in dead_builds(envs_dir(), ".*.tmp"):
        shutil.rmtree(child, ignore_errors=True)


def lookup(key: str) -> EnvInfo | None:
    """The built environment ``key`` (None when there is none, or ``key`` is not a key)."""
    if not _KEY_RE.fullmatch(key):
        return None
    return _info(envs_dir() / key)


def remove_all() -> int:
    """Delete every built environment (and half-built leftovers); returns how many were removed."""
    root = envs_dir()
    if not root.is_dir():
        return 0
    n = 0
    for child in root.iterdir():
        shutil.rmtree(child, ignore_errors=True)
        n += 1
    return n


DEFAULT_PACKAGES = ("scikit-learn", "numpy", "pandas", "scipy", "mlflow", "pyarrow", "boto3")
"""What the default environment reports of itself (the workloads' main libraries)."""


def interpreter(key: str) -> Path:
    """The interpreter of the environment ``key`` (the sandbox's own for ``default``); :class:`KeyError`
    when no such environment was built."""
    if key == DEFAULT_KEY:
        return Path(sys.executable)
    found = lookup(key)
    if found is None:
        raise KeyError(f"environment {key!r} has not been built")
    return found.python


SCORE_TIMEOUT_S = 600.0
"""How long a scorer process may take (a first run in a fresh environment compiles its bytecode)."""


class LocalEnvironments:
    """uv venvs of this machine (shared by every sandbox of ``$MLSANDBOX_HOME``); the default is the
    sandbox's own interpreter. ``tracking_uri`` is the sandbox's MLflow server, where :meth:`score` gets
    its models."""

    def __init__(self, tracking_uri: str | None = None) -> None:
        self.tracking_uri = tracking_uri

    def score(self, key: str, model_name: str, version: str, rows: Any) -> list[float]:
        """The scorer workload (:mod:`mlsandbox.workloads.scorer`) run by the environment's interpreter,
        with the tracking server's address only; the rows and the probabilities pass through files."""
        if self.tracking_uri is None:
            raise ModelScoreError("no tracking server to load the model from")
        python = interpreter(key)
        workload = Path(__file__).resolve().parents[2] / "workloads" / "scorer.py"
        with tempfile.TemporaryDirectory(prefix="mlsandbox-score-") as tmp:
            features, out = Path(tmp) / "rows.parquet", Path(tmp) / "proba.json"
            rows.to_parquet(features)
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": tmp,
                "MLFLOW_TRACKING_URI": self.tracking_uri,
            }
            argv = [str(python), str(workload), "--model-uri", f"models:/{model_name}/{version}"]
            argv += ["--features", str(features), "--out", str(out)]
            try:
                done = subprocess.run(
                    argv, capture_output=True, text=True, env=env, cwd=tmp, timeout=SCORE_TIMEOUT_S
                )
            except subprocess.TimeoutExpired:
                raise ModelScoreError(f"the scorer did not answer within {SCORE_TIMEOUT_S:g} s") from None
            if done.returncode != 0:
                lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
                raise ModelScoreError(
                    lines[-1] if lines else f"the scorer exited with status {done.returncode}"
                )
            return [float(v) for v in json.loads(out.read_text())]

    def default(self) -> EnvironmentInfo:
        found = {}
        for dist in DEFAULT_PACKAGES:
            try:
                found[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
        return EnvironmentInfo(key=DEFAULT_KEY, requirements=[], packages=found)

    def build(self, requirements: list[str]) -> EnvironmentInfo:
        return _model(build(requirements))

    def get(self, key: str) -> EnvironmentInfo:
        if key == DEFAULT_KEY:
            return self.default()
        found = lookup(key)
        if found is None:
            raise KeyError(f"environment {key!r} has not been built")
        return _model(found)

    def for_serving(self, env: EnvironmentInfo) -> EnvironmentInfo:
        if env.key == DEFAULT_KEY:
            return env
        return self.build([*env.requirements, *server_requirements()])


SERVER_PACKAGES = ("prometheus-client", "orjson", "httpx", "uvloop", "httptools", "fastapi", "uvicorn")
"""What the model server imports besides what every environment has (MLflow, pandas, scikit-learn)."""


def server_requirements() -> list[str]:
    """The model server's packages pinned to the versions the sandbox itself runs it with."""
    from importlib.metadata import version

    return [f"{dist}=={version(dist)}" for dist in SERVER_PACKAGES]


def _model(info: EnvInfo) -> EnvironmentInfo:
    return EnvironmentInfo(key=info.key, requirements=list(info.requirements), packages=dict(info.packages))
