"""What several command groups share: the ``--backend`` option, its choices taken from the backend
registry (built-in backends and installed plug-ins, listed in the option's help), the sandbox-name
options, and the consoles every command prints through (nothing cut when the output is not a terminal)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console, ConsoleDimensions

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

SANDBOX_HELP = "The sandbox's name (several can run side by side; default: $MLSANDBOX_NAME or 'default')."


def sandbox_option(what: str = SANDBOX_HELP) -> typer.models.OptionInfo:
    """``--name`` / ``--sandbox`` / ``-n``, the same on every command that addresses a sandbox."""
    return typer.Option("--name", "--sandbox", "-n", envvar="MLSANDBOX_NAME", metavar="NAME", help=what)


NameOpt = Annotated[str, sandbox_option()]
"""``--name NAME`` (also ``--sandbox``, ``-n``, ``$MLSANDBOX_NAME``; default ``default``)."""
OptionalNameOpt = Annotated[str | None, sandbox_option()]
"""The same option where the sandbox is optional (asked of the backend without starting anything)."""
NoStartOpt = Annotated[
    bool,
    typer.Option("--no-start", help="Fail instead of starting a sandbox when the named one is not running."),
]


def agent_help(what: str = "Agent") -> str:
    from mlsandbox.agents import AGENTS

    return f"{what}: {' | '.join(AGENTS)} or module:attribute (reference: the scenario's reference solution)."


LevelOpt = Annotated[
    str | None,
    typer.Option(
        "--level",
        help="A curriculum level to apply (its faults added, its budget factor applied; see "
        "`mlsandbox curriculum show`).",
    ),
]


def with_level(scenario: Any, name: str | None) -> Any:
    """``scenario`` with the curriculum level ``name`` applied (unchanged for None); ValueError naming the
    levels for an unknown one, or saying why the level does not fit the scenario."""
    if name is None:
        return scenario
    from mlsandbox.faults.curriculum import apply_level

    try:
        return apply_level(scenario, name)
    except KeyError as e:
        raise ValueError(str(e.args[0])) from None
    except ValueError as e:
        raise ValueError(f"curriculum level {name!r} does not fit scenario {scenario.id!r}: {e}") from None


UNBOUNDED_WIDTH = 100_000
"""The width tables get when the output is not a terminal: wide enough that no cell is ever cut."""


class OutputConsole(Console):
    """A rich ``Console`` that never cuts or wraps what a program reads: when its stream is not a terminal
    (a pipe, a file, a test runner), its width is unbounded, so table cells (ids, URLs, paths) are printed
    whole and text is not hard-wrapped; on a terminal it behaves as usual (the terminal's width)."""

    @property
    def size(self) -> ConsoleDimensions:
        dims = super().size
        if self._width is None and not self.is_terminal:
            return ConsoleDimensions(UNBOUNDED_WIDTH, dims.height)
        return dims

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


def make_console(*, stderr: bool = False) -> Console:
    """The console a command prints through (stdout, or stderr for diagnostics and progress)."""
    return OutputConsole(stderr=stderr)


__all__ = [
    "BACKEND_CHOICES",
    "DEFAULT_BACKEND",
    "BackendOpt",
    "LevelOpt",
    "NameOpt",
    "NoStartOpt",
    "OptionalNameOpt",
    "OutputConsole",
    "agent_help",
    "backend_help",
    "backend_option",
    "check_backend",
    "human_bytes",
    "make_console",
    "sandbox_option",
    "with_level",
]


def human_bytes(n: int | None) -> str:
    """A byte count for a table: B, KiB, MiB or GiB; "-" when unknown."""
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
