"""The shipped calibration of the ``sim`` backend (see :mod:`.model` for what it holds).

One JSON document per synthetic-data generator version, ``data/generator-<GENERATOR_VERSION>.json``
next to this module; :func:`load_calibration` reads the one matching the running generator (or a file
given by path: ``SimConfig.calibration``) and checks it against the schema.
"""

from __future__ import annotations

import functools
from pathlib import Path

from pydantic import ValidationError

from mlsandbox.calibration.model import Calibration
from mlsandbox.data.tabular import GENERATOR_VERSION
from mlsandbox.errors import ConfigError

DIRECTORY = Path(__file__).resolve().parent / "data"
"""Where the package ships its calibrations."""


def default_path(generator_version: int = GENERATOR_VERSION) -> Path:
    """The shipped calibration of a generator version."""
    return DIRECTORY / f"generator-{generator_version}.json"


@functools.cache
def _load(path: str, mtime: float) -> Calibration:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"calibration {p}: cannot be read: {e}") from None
    try:
        return Calibration.model_validate_json(text)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in err['loc']) or '<document>'}: {err['msg']}"
            for err in e.errors(include_url=False)[:10]
        )
        raise ConfigError(f"calibration {p} is invalid: {problems}") from None


def load_calibration(path: str | Path | None = None) -> Calibration:
    """The calibration at ``path`` (the shipped one of the running generator version when None);
    :class:`~mlsandbox.errors.ConfigError` naming the file and the fields when it cannot be used.
    Loaded once per file and modification time."""
    p = Path(path) if path is not None else default_path()
    if not p.is_file():
        if path is None:
            raise ConfigError(
                f"no calibration ships for data generator version {GENERATOR_VERSION} ({p.name}); "
                "rebuild it with `mlsandbox calibrate`"
            )
        raise ConfigError(f"calibration {p} does not exist")
    cal = _load(str(p.resolve()), p.stat().st_mtime)
    if cal.meta.generator_version != GENERATOR_VERSION:
        raise ConfigError(
            f"calibration {p} was made with data generator version {cal.meta.generator_version}; "
            f"this one is version {GENERATOR_VERSION}: rebuild it with `mlsandbox calibrate`"
        )
    return cal


__all__ = ["DIRECTORY", "default_path", "load_calibration"]
