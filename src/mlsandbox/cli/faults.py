"""CLI commands of the fault engine: ``mlsandbox curriculum show`` and ``mlsandbox faults catalog``.

``register(app)`` adds them to the main ``mlsandbox`` Typer app.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from mlsandbox.faults.curriculum import LEVELS, level
from mlsandbox.scenario.perturbations import FAULT_MODELS

console = Console()
curriculum_app = typer.Typer(help="Curricula of perturbations, simple to combined.", no_args_is_help=True)
faults_app = typer.Typer(help="The fault catalog.", no_args_is_help=True)


def _compact(d: dict[str, object]) -> str:
    return " ".join(f"{k}={v}" for k, v in d.items())


def _when(p: object) -> str:
    return _compact(p.when.model_dump(exclude_none=True))  # type: ignore[attr-defined]


@curriculum_app.command("show")
def curriculum_show(
    name: Annotated[str | None, typer.Argument(help="A level (default: every level).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show the curriculum levels and the faults each one composes."""
    levels = [level(name)] if name else list(LEVELS)
    if as_json:
        typer.echo(json.dumps([lv.model_dump(mode="json") for lv in levels], indent=2))
        return
    table = Table(title="curriculum")
    for col in ("level", "difficulty", "budget", "fault", "target", "when", "duration", "recovery"):
        table.add_column(col)
    for lv in levels:
        rows = lv.plan or [None]
        for i, p in enumerate(rows):
            head = [lv.name, str(lv.difficulty), f"x{lv.budget_factor:g}"] if i == 0 else ["", "", ""]
            if p is None:
                table.add_row(*head, "-", "-", "-", "-", "-")
                continue
            d = _compact(p.duration.model_dump(exclude_none=True)) if p.duration else "-"
            table.add_row(*head, p.fault.type, p.target or "", _when(p), d, p.recovery)
    console.print(table)
    for lv in levels:
        console.print(f"[bold]{lv.name}[/]: {lv.description}")


@faults_app.command("catalog")
def faults_catalog() -> None:
    """Every fault type with its target kinds, parameters, and whether it can be made real here."""
    from mlsandbox.backends.local.faults.control import unavailable_here

    missing = unavailable_here()
    table = Table(title="fault catalog")
    for col in ("type", "category", "targets", "parameters", "here", "what happens"):
        table.add_column(col)
    for model in FAULT_MODELS:
        kind = model.model_fields["type"].default
        params = ", ".join(
            f"{k} (required)" if v.is_required() else f"{k}={v.default!r}"
            for k, v in model.model_fields.items()
            if k != "type"
        )
        table.add_row(
            kind,
            model.category,
            ", ".join(model.targets),
            params or "-",
            "[red]unavailable[/]" if kind in missing else "yes",
            " ".join((model.__doc__ or "").split()),
        )
    console.print(table)
    for kind, reason in sorted(missing.items()):
        console.print(f"[bold]{kind}[/] unavailable: {reason}")
    console.print(
        "Targets: source:NAME is a data source the scenario declares (sources:); pool is the episode's "
        "compute pool (compute:, with a capacity)."
    )


def register(app: typer.Typer) -> None:
    app.add_typer(curriculum_app, name="curriculum")
    app.add_typer(faults_app, name="faults")


if __name__ == "__main__":
    root = typer.Typer(no_args_is_help=True)
    register(root)
    root()
