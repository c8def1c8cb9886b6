"""Atomic files: a file is written beside its destination and renamed into place, so a reader (or a
crash) never sees it half-written."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # a regular file's mode, not the private one mkstemp gives
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_jsonl(path: Path, records: Iterable[BaseModel]) -> None:
    write_atomic(path, "".join(r.model_dump_json() + "\n" for r in records))


__all__ = ["write_atomic", "write_jsonl"]
