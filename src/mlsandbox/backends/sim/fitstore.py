"""Real fits kept on disk, shared by every ``sim`` process of the machine.

A fit in ``sim`` is the trainer's own (:mod:`mlsandbox.backends.sim.realfit`): exact, and as slow as the
estimator (50 ms to 1 s). Its outcome is a function of its key alone (the bytes' digest, target,
algorithm, hyperparameters, seed and task) and of the code and libraries that fit it. So a fit done once
can be kept on disk and read back by any later episode, by the other processes of a vector env, and by the
next training run over the same instances. The outcome read back is the one a fit would give: nothing is
approximated.

Layout: one file per fit, ``<sha256>.pkl``, in the store's directory; the name hashes the fit's key with
the *fingerprint* (the versions of scikit-learn, numpy, pandas and scipy, and a digest of the workloads'
source), so an upgrade or an edit of a trainer never reads an old fit. Writes are atomic (a temporary file
renamed into place), so processes may share the store without a lock. The store is bounded
(``max_bytes``): once it grows past the bound, the files read least recently go first. A read refreshes
the file's modification time.

The files are pickles, and a pickle runs code when it is read, so the store is used only in a directory
that this user owns and nobody else may write to (made ``0700``); any other directory is refused with a
warning and the fits are kept in memory only. Code an agent writes never runs in ``sim``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import tempfile
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_MAX_MIB = 2048
"""The store's default bound (a 100-tree forest on a few thousand rows pickles to a few MiB)."""
STORE_ENV = "MLSANDBOX_SIM_FIT_STORE"
"""Where the store lives; ``off`` turns it off. Default: ``<mlsandbox home>/sim-fits``."""
PRUNE_EVERY = 32
"""Writes between two measurements of the store's size."""


def default_directory() -> str | None:
    """``$MLSANDBOX_SIM_FIT_STORE`` (``off``: None), else ``<mlsandbox home>/sim-fits``."""
    from mlsandbox.paths import home

    value = os.environ.get(STORE_ENV)
    if value is not None and value.strip().lower() in {"off", "none", "0", ""}:
        return None
    return value or str(home() / "sim-fits")


def fingerprint() -> str:
    """What a kept fit depends on besides its key: the libraries' versions and the workloads' source."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        import numpy
        import pandas
        import scipy
        import sklearn

        import mlsandbox.workloads as workloads

        h = hashlib.sha256()
        for lib in (sklearn, numpy, pandas, scipy):
            h.update(f"{lib.__name__}={lib.__version__};".encode())
        for path in sorted(Path(workloads.__file__).parent.glob("*.py")):
            h.update(path.name.encode())
            h.update(path.read_bytes())
        _FINGERPRINT = h.hexdigest()[:16]
    return _FINGERPRINT


_FINGERPRINT: str | None = None


class FitStore:
    """See the module docstring. ``get`` and ``put`` never raise: a store that cannot be read or
    written behaves as a miss (the fit is then done, and kept in memory)."""

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_MIB << 20) -> None:
        self.directory = Path(directory).expanduser()
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self.writes = 0
        self._lock = threading.Lock()
        self._since_prune = PRUNE_EVERY  # measure at the first write
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = self.directory.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            raise PermissionError(
                f"the fit store {self.directory} must belong to uid {os.getuid()} and be writable by it "
                f"alone (owner uid {st.st_uid}, mode {oct(st.st_mode & 0o777)}): its files are pickles"
            )

    def __repr__(self) -> str:
        return f"FitStore({str(self.directory)!r}, max_bytes={self.max_bytes})"

    def path(self, key: tuple[Any, ...]) -> Path:
        name = hashlib.sha256(repr((fingerprint(), key)).encode()).hexdigest()
        return self.directory / f"{name}.pkl"

    def get(self, key: tuple[Any, ...]) -> Any | None:
        path = self.path(key)
        try:
            with path.open("rb") as f:
                value = pickle.load(f)  # a directory only this user can write (see above)
            os.utime(path)
        except FileNotFoundError:
            self.misses += 1
            return None
        except Exception as e:  # a torn or foreign file: drop it, fit again
            log.warning("dropping an unreadable kept fit %s: %s", path.name, e)
            path.unlink(missing_ok=True)
            self.misses += 1
            return None
        self.hits += 1
        return value

    def put(self, key: tuple[Any, ...], value: Any) -> None:
        path = self.path(key)
        try:
            data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # a model that does not pickle stays in memory only
            log.debug("a fit that does not pickle is not kept on disk: %s", e)
            return
        if len(data) > self.max_bytes:
            return
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".pkl")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError as e:
            log.warning("the fit store %s refused a write: %s", self.directory, e)
            return
        with self._lock:
            self.writes += 1
            self._since_prune += 1
            due = self._since_prune >= PRUNE_EVERY
            if due:
                self._since_prune = 0
        if due:
            self.prune()

    def size(self) -> tuple[int, int]:
        """(files, bytes) kept."""
        files = total = 0
        for entry in os.scandir(self.directory):
            if entry.name.endswith(".pkl") and not entry.name.startswith(".tmp-"):
                try:
                    total += entry.stat().st_size
                    files += 1
                except FileNotFoundError:
                    pass
        return files, total

    def prune(self) -> int:
        """Remove the files read least recently until the store is under nine tenths of its bound;
        returns how many went. Temporary files older than an hour (a writer that died) go too."""
        import time

        entries = []
        total = 0
        now = time.time()
        for entry in os.scandir(self.directory):
            try:
                st = entry.stat()
            except FileNotFoundError:
                continue
            if entry.name.startswith(".tmp-"):
                if now - st.st_mtime > 3600:
                    Path(entry.path).unlink(missing_ok=True)
                continue
            if entry.name.endswith(".pkl"):
                entries.append((st.st_mtime, st.st_size, entry.path))
                total += st.st_size
        if total <= self.max_bytes:
            return 0
        removed = 0
        for _, size, p in sorted(entries):
            if total <= self.max_bytes * 0.9:
                break
            Path(p).unlink(missing_ok=True)
            total -= size
            removed += 1
        return removed

    def clear(self) -> int:
        """Remove every kept fit; returns how many."""
        n = 0
        for entry in os.scandir(self.directory):
            if entry.name.endswith(".pkl"):
                Path(entry.path).unlink(missing_ok=True)
                n += 1
        return n


_STORE: FitStore | None = None
_CONFIGURED: tuple[str | None, int] | None = None


def configure(directory: str | None, max_bytes: int = DEFAULT_MAX_MIB << 20) -> FitStore | None:
    """Use the store in ``directory`` for this process's fits (None: none). A directory that cannot be
    used is refused with a warning, and fits are then kept in memory only."""
    global _STORE, _CONFIGURED
    if (directory, max_bytes) == _CONFIGURED:
        return _STORE
    _CONFIGURED = (directory, max_bytes)
    if directory is None:
        _STORE = None
        return None
    try:
        _STORE = FitStore(directory, max_bytes)
    except OSError as e:
        log.warning("fits are kept in memory only: %s", e)
        _STORE = None
    return _STORE


def current() -> FitStore | None:
    """The store this process's fits use (None until :func:`configure`, or when off)."""
    return _STORE


__all__ = [
    "DEFAULT_MAX_MIB",
    "STORE_ENV",
    "FitStore",
    "configure",
    "current",
    "default_directory",
    "fingerprint",
]
