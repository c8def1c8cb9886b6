"""Experiment tracking and model registry over an MLflow tracking server (every backend).

Everything goes through one :class:`mlflow.MlflowClient` bound to the server's URL (tracking *and*
registry): no global mlflow state is read or set, so several sandboxes can live in one process.

Errors: a missing run, experiment, model or version raises :class:`KeyError`; an invalid or conflicting
request (a name already taken, a malformed id) raises :class:`ValueError`; an unreachable or failing
server raises :class:`~mlsandbox.errors.BackendError`.

Fail fast: mlflow reads its HTTP retry policy from the environment on every request and offers no
per-client setting, so constructing an :class:`MLflowTracking` sets process-wide *defaults* (only where
unset) of 2 retries, backoff factor 1 and a 30 s timeout: a dead server fails in a few seconds instead
of minutes. Export the ``MLFLOW_HTTP_REQUEST_*`` variables before to choose other values. Downloads are
proxied by the server (``MLFLOW_ENABLE_PROXY_MULTIPART_DOWNLOAD=false`` unless set): the presigned URLs
of its store may name an address only the server reaches.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mlsandbox.backends.protocols import ModelVersionInfo, RunInfo
from mlsandbox.errors import BackendError

HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
    # Artifacts stream through the tracking server: a server whose store is S3 offers presigned URLs
    # naming its own S3 endpoint, which a client elsewhere may not reach (on a cluster, the in-cluster
    # MinIO Service: every download then retried chunks for minutes and failed).
    "MLFLOW_ENABLE_PROXY_MULTIPART_DOWNLOAD": "false",
}
"""Client settings applied with ``os.environ.setdefault`` (see the module docstring)."""

READY_TIMEOUT_S = 60.0
_NOT_FOUND = frozenset({"RESOURCE_DOES_NOT_EXIST", "NOT_FOUND", "ENDPOINT_NOT_FOUND"})
_BAD_REQUEST = frozenset(
    {"RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS", "INVALID_PARAMETER_VALUE", "BAD_REQUEST"}
)
_PAGE = 1000


def _seconds(millis: int | None) -> float | None:
    return None if millis is None else millis / 1000.0


def _first_line(message: str) -> str:
    """The server's message without the SQL statement and parameters some errors carry."""
    return message.strip().splitlines()[0] if message.strip() else message


def _quote(value: str) -> str:
    """A string literal for an MLflow filter expression."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class MLflowTracking:
    """The MLflow server at ``tracking_uri`` (e.g. ``http://127.0.0.1:5000``), also its model registry."""

    def __init__(self, tracking_uri: str) -> None:
        for key, value in HTTP_DEFAULTS.items():
            os.environ.setdefault(key, value)
        from mlflow import MlflowClient  # heavy import: only when a tracking client is made

        self.tracking_uri = tracking_uri
        self.client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)

    def __repr__(self) -> str:
        return f"MLflowTracking(tracking_uri={self.tracking_uri!r})"

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Map MlflowException to KeyError / ValueError / BackendError (see the module docstring)."""
        from mlflow.exceptions import MlflowException

        try:
            yield
        except MlflowException as exc:
            code = str(exc.error_code)
            message = _first_line(str(exc.message))
            if code in _NOT_FOUND:
                raise KeyError(f"{what}: {message}") from exc
            if code in _BAD_REQUEST:
                raise ValueError(f"{what}: {message}") from exc
            raise BackendError(f"MLflow {what} failed at {self.tracking_uri}: {message}") from exc

    # -------------------------------------------------------------------------------------- experiments

    def create_experiment(self, name: str, tags: dict[str, str] | None = None) -> str:
        with self._errors(f"create experiment {name!r}"):
            return str(self.client.create_experiment(name, tags=tags))

    def delete_experiment(self, experiment_id: str) -> None:
        with self._errors(f"delete experiment {experiment_id!r}"):
            self.client.delete_experiment(experiment_id)

    # --------------------------------------------------------------------------------------------- runs

    def list_runs(self, experiment_id: str) -> list[RunInfo]:
        """Active runs of the experiment, newest first."""
        runs: list[RunInfo] = []
        token: str | None = None
        with self._errors(f"list runs of experiment {experiment_id!r}"):
            while True:
                page = self.client.search_runs(
                    [experiment_id],
                    max_results=_PAGE,
                    order_by=["attributes.start_time DESC"],
                    page_token=token,
                )
                runs.extend(_run_info(run) for run in page)
                token = page.token
                if not token:
                    return runs

    def search_runs(
        self,
        experiment_id: str,
        filter_string: str = "",
        order_by: list[str] | None = None,
        max_results: int = 100,
    ) -> list[RunInfo]:
        """Active runs of one experiment matching an MLflow filter expression, in ``order_by`` order.
        :class:`ValueError` for a filter or ordering the server rejects (its own message)."""
        with self._errors(f"search runs of experiment {experiment_id!r}"):
            page = self.client.search_runs(
                [experiment_id],
                filter_string=filter_string,
                max_results=max_results,
                order_by=order_by or ["attributes.start_time DESC"],
            )
        return [_run_info(run) for run in page]

    def get_run(self, run_id: str) -> RunInfo:
        """Raise :class:`KeyError` when the run does not exist."""
        return _run_info(self._get_run(run_id))

    def _get_run(self, run_id: str) -> Any:
        try:
            with self._errors(f"run {run_id!r}"):
                return self.client.get_run(run_id)
        except ValueError as exc:  # a malformed id is a missing run too
            raise KeyError(str(exc)) from exc

    # ----------------------------------------------------------------------------------------- registry

    def register_model(self, run_id: str, name: str, artifact_path: str = "model") -> ModelVersionInfo:
        """Register the model the run logged under ``artifact_path`` as a new version of ``name``.

        MLflow 3 logs models as LoggedModels (``models:/<model_id>``) linked to their run; a model logged
        into the run's own artifacts (MLflow 2 style) is registered from there. Waits until the version
        is READY. :class:`KeyError` when the run or its model does not exist.
        """
        run = self._get_run(run_id)
        source, model_id = self._model_source(run, artifact_path)
        self._ensure_registered_model(name)
        with self._errors(f"create a version of model {name!r}"):
            version = self.client.create_model_version(
                name, source, run_id=run_id, model_id=model_id, await_creation_for=0
            )
        info = self._wait_ready(name, str(version.version))
        _warm_model_loading()  # a registered version is about to be graded or served
        return info

    def _model_source(self, run: Any, artifact_path: str) -> tuple[str, str | None]:
        run_id, experiment_id = run.info.run_id, run.info.experiment_id
        with self._errors(f"logged models of run {run_id!r}"):
            models = [
                m
                for m in self._search_logged_models(experiment_id, artifact_path)
                if m.source_run_id == run_id
            ]
        if models:
            newest = max(models, key=lambda m: m.creation_timestamp or 0)
            return f"models:/{newest.model_id}", newest.model_id
        with self._errors(f"artifacts of run {run_id!r}"):
            names = {a.path.rsplit("/", 1)[-1] for a in self.client.list_artifacts(run_id, artifact_path)}
        if "MLmodel" in names:
            return f"{run.info.artifact_uri.rstrip('/')}/{artifact_path}", None
        raise KeyError(f"run {run_id!r} has no model logged under {artifact_path!r}")

    def _search_logged_models(self, experiment_id: str, name: str) -> list[Any]:
        found: list[Any] = []
        token: str | None = None
        while True:
            page = self.client.search_logged_models(
                experiment_ids=[experiment_id], filter_string=f"name = {_quote(name)}", page_token=token
            )
            found.extend(page)
            token = page.token
            if not token:
                return found

    def _ensure_registered_model(self, name: str) -> None:
        try:
            with self._errors(f"create registered model {name!r}"):
                self.client.create_registered_model(name)
        except ValueError as exc:
            code = getattr(exc.__cause__, "error_code", "")
            if code not in ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"):
                raise

    def _wait_ready(self, name: str, version: str, timeout_s: float = READY_TIMEOUT_S) -> ModelVersionInfo:
        deadline = time.monotonic() + timeout_s
        while True:
            with self._errors(f"model {name!r} version {version}"):
                mv = self.client.get_model_version(name, version)
            status = str(mv.status)
            if status == "READY":
                return _version_info(mv)
            if status == "FAILED_REGISTRATION":
                raise BackendError(f"model {name!r} version {version} failed: {mv.status_message}")
            if time.monotonic() > deadline:
                raise BackendError(f"model {name!r} version {version} not READY after {timeout_s:.0f} s")
            time.sleep(0.2)

    def list_model_versions(self, name_prefix: str) -> list[ModelVersionInfo]:
        """Every version of every registered model whose name starts with ``name_prefix``."""
        versions: list[ModelVersionInfo] = []
        token: str | None = None
        like = name_prefix.replace("%", "\\%") + "%"
        with self._errors(f"list model versions {name_prefix!r}*"):
            while True:
                page = self.client.search_model_versions(
                    filter_string=f"name LIKE {_quote(like)}", max_results=_PAGE, page_token=token
                )
                # LIKE's "_" matches any character: keep exact prefix matches only.
                versions.extend(_version_info(mv) for mv in page if mv.name.startswith(name_prefix))
                token = page.token
                if not token:
                    break
            # Search results carry no aliases: the registered model has them (alias -> version).
            for name in {v.name for v in versions}:
                aliases = dict(self.client.get_registered_model(name).aliases or {})
                for v in versions:
                    if v.name == name:
                        v.aliases = sorted(a for a, ver in aliases.items() if str(ver) == v.version)
        return sorted(versions, key=lambda v: (v.name, int(v.version)))

    def set_model_alias(self, name: str, alias: str, version: str) -> ModelVersionInfo:
        """Point ``alias`` of model ``name`` at ``version`` (moving it from any other version)."""
        with self._errors(f"model {name!r} version {version}"):
            self.client.set_registered_model_alias(name, alias, str(version))
            return _version_info(self.client.get_model_version(name, str(version)))

    def delete_model_alias(self, name: str, alias: str) -> None:
        """Remove an alias; :class:`KeyError` when the model or the alias does not exist."""
        with self._errors(f"alias {alias!r} of model {name!r}"):
            self.client.get_model_version_by_alias(name, alias)
            self.client.delete_registered_model_alias(name, alias)

    def delete_registered_model(self, name: str) -> None:
        """Delete the model and its versions; :class:`KeyError` when it does not exist."""
        with self._errors(f"registered model {name!r}"):
            self.client.delete_registered_model(name)

    def load_model(self, name: str, version: str) -> Any:
        """Download the version's artifacts from this server and load them (sklearn flavor, else pyfunc)."""
        _wait_warm()
        import mlflow.artifacts

        with self._errors(f"model {name!r} version {version}"):
            uri = self.client.get_model_version_download_uri(name, str(version))
        with tempfile.TemporaryDirectory(prefix="mlsandbox-model-") as tmp:
            with self._errors(f"download model {name!r} version {version}"):
                local = mlflow.artifacts.download_artifacts(
                    artifact_uri=uri,
                    dst_path=tmp,
                    tracking_uri=self.tracking_uri,
                    registry_uri=self.tracking_uri,
                )
            return _load_local_model(local)


SAFE_TRUSTED_PREFIXES = ("sklearn.", "numpy.", "scipy.", "pandas.", "mlsandbox.workloads.")
"""Modules whose types a skops model may ask to be trusted: loading it runs no other code. A model is
data an agent's own code may have written (a workspace script), and this process holds the holdout."""


class UnsafeModelError(ValueError):
    """A model whose loading could run code of its own (pickle, custom pyfunc, a skops model trusting
    types outside :data:`SAFE_TRUSTED_PREFIXES`): refused, never loaded."""


def _load_local_model(path: str) -> Any:
    from mlflow.models import Model

    flavors = Model.load(path).flavors
    sk = flavors.get("sklearn")
    if sk is None or sk.get("serialization_format") != "skops":
        raise UnsafeModelError(
            "only scikit-learn models saved with skops are loaded (mlflow.sklearn.log_model(..., "
            "serialization_format='skops')): pickle or a custom pyfunc would run the model's own code"
        )
    trusted = [str(t) for t in sk.get("skops_trusted_types") or []]
    unsafe = [t for t in trusted if not t.startswith(SAFE_TRUSTED_PREFIXES)]
    if unsafe:
        raise UnsafeModelError(
            f"the skops model trusts types outside scikit-learn/numpy/scipy/pandas: {unsafe}"
        )
    _import_skops_without_torch()
    import mlflow.sklearn

    return mlflow.sklearn.load_model(path)


# Loading a skops model imports ``skops.io``, whose trusted-type discovery (scikit-learn's
# ``all_estimators()``) imports every scikit-learn module, the array-API shim of PyTorch included: where the
# ``rl`` extra installed PyTorch, the first load in a process imported it (about 500 MiB and 8-10 s of a
# grade). The discovery needs no PyTorch (no estimator comes from it), so ``skops.io`` is imported once with
# ``import torch`` refused in the importing thread only, as if PyTorch were not installed; nothing else is
# affected: other threads import it meanwhile, a later ``import torch`` anywhere works, and a process that
# has already imported PyTorch is left as it is. The model itself is then loaded without any blocking.


class _ThreadImportBlocker:
    """A meta-path finder refusing the top-level packages of ``blocked`` in the threads registered."""

    def __init__(self, blocked: frozenset[str]) -> None:
        self.blocked = blocked
        self.threads: set[int] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if (
            self.threads
            and fullname.partition(".")[0] in self.blocked
            and threading.get_ident() in self.threads
        ):
            raise ModuleNotFoundError(
                f"No module named {fullname!r} (not needed to load a model)", name=fullname
            )
        return None

    @contextmanager
    def active(self) -> Iterator[None]:
        """Refuse the blocked imports in this thread for the duration (installs the finder once: it
        stays in ``sys.meta_path``, inert when no thread is registered, so no import ever races its removal)."""
        with _BLOCKER_LOCK:
            if self not in sys.meta_path:
                sys.meta_path.insert(0, self)
        ident = threading.get_ident()
        self.threads.add(ident)
        try:
            yield
        finally:
            self.threads.discard(ident)


_BLOCKER_LOCK = threading.Lock()
_TORCH_BLOCKER = _ThreadImportBlocker(frozenset({"torch"}))


_WARMED = threading.Event()
_WARM_THREADS: list[threading.Thread] = []
"""The warm-up thread once started (a load waits for it: see :func:`_wait_warm`)."""


def _warm_model_loading() -> None:
    """Once per process, in a background thread: the imports a model's first load needs (``skops.io``
    without PyTorch, MLflow's sklearn flavor, scikit-learn's metrics), so the grade that follows a
    registration does not pay them (1.8-3 s on 2 busy cores). A load meanwhile waits for the same module
    locks, never imports twice; a failure here is left to the load, which reports it."""
    if _WARMED.is_set():
        return
    _WARMED.set()

    def warm() -> None:
        with contextlib.suppress(Exception):
            _import_skops_without_torch()
            import mlflow.sklearn  # noqa: F401
            import sklearn.metrics  # noqa: F401

    thread = threading.Thread(target=warm, name="mlsandbox-warm-model-loading", daemon=True)
    _WARM_THREADS.append(thread)
    thread.start()


def _wait_warm(timeout_s: float = 300.0) -> None:
    """Wait for the warm-up imports to end before importing the same packages here: scikit-learn's
    package imports itself in a cycle, and two threads importing it at once can leave one of them with a
    partially initialised module (``ImportError: cannot import name ...``)."""
    for thread in list(_WARM_THREADS):
        if thread is not threading.current_thread():
            thread.join(timeout_s)


def _import_skops_without_torch() -> None:
    """Import ``skops.io`` without PyTorch (see above); nothing when either is already imported. A failure
    is left to the model's load, which imports ``skops.io`` again and reports it as it always did."""
    if "skops.io" in sys.modules or "torch" in sys.modules:
        return
    with _TORCH_BLOCKER.active():
        try:
            import skops.io  # noqa: F401
        except ImportError:
            return


def _run_info(run: Any) -> RunInfo:
    info, data = run.info, run.data
    return RunInfo(
        run_id=info.run_id,
        experiment_id=str(info.experiment_id),
        status=str(info.status),
        start_time=_seconds(info.start_time),
        end_time=_seconds(info.end_time),
        params=dict(data.params),
        metrics={k: float(v) for k, v in data.metrics.items()},
        tags=dict(data.tags),
    )


def _version_info(mv: Any) -> ModelVersionInfo:
    return ModelVersionInfo(
        name=mv.name,
        version=str(mv.version),
        run_id=mv.run_id or None,
        source=str(mv.source),
        status=str(mv.status),
        aliases=sorted(getattr(mv, "aliases", None) or []),
        created_at=_seconds(getattr(mv, "creation_timestamp", None)),
    )
