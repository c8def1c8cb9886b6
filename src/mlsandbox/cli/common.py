"""What several command groups share: the ``--backend`` option, its choices taken from the backend
registry (built-in backends and installed plug-ins, listed in the option's help)."""

from __future__ import annotations

from typing import Annotated

import typer

from mlsandbox.backends.registry import DEFAULT_BACKEND, backend_names

BACKEND_CHOICES: tuple[str, ...] = backend_names()
"""Every registered backend (read from the entry points without loading any backend)."""


def backend_help(what: str = "The backend of the sandbox") -> str:
    return f"{what}: {' | '.join(BACKEND_CHOICES)} (registered backends; see `mlsandbox plugins`)."


def check_backend(value: str) -> str:
    """``value`` when it names a registered backend; a usage error naming the backends otherwise."""
    if value not in BACKEND_CHOICES:
        raise typer.BadParameter(f"unknown backend {value!r}; backends: {', '.join(BACKEND_CHOICES)}")
    return value


def backend_option(what: str = "The backend of the sandbox", *short: str) -> typer.models.OptionInfo:
    """A ``--backend`` option whose value must be a registered backend."""
    return typer.Option(
        "--backend", *short, callback=check_backend, metavar="BACKEND", help=backend_help(what)
    )


BackendOpt = Annotated[str, backend_option()]
"""``--backend NAME`` (default ``local``)."""

__all__ = [
    "BACKEND_CHOICES",
    "DEFAULT_BACKEND",
    "BackendOpt",
    "backend_help",
    "backend_option",
    "check_backend",
]
