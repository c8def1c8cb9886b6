"""CLI commands of the fault engine: ``mlsandbox curriculum show`` and ``mlsandbox faults catalog
[--backend X]``.

``register(app)`` adds them to the main ``mlsandbox`` Typer app.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from mlsandbox.backends import DEFAULT_BACKEND, get_backend
from mlsandbox.cli.common import OptionalNameOpt, backend_option, make_console

if TYPE_CHECKING:
    from mlsandbox.backends.protocols import Support
    from mlsandbox.scenario.perturbations import Perturbation

console = make_console()
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
    from mlsandbox.faults.curriculum import LEVELS, level

    levels = [level(name)] if name else list(LEVELS)
    if as_json:
        typer.echo(json.dumps([lv.model_dump(mode="json") for lv in levels], indent=2))
        return
    table = Table(title="curriculum")
    for col in ("level", "difficulty", "budget", "fault", "target", "when", "duration", "recovery"):
        table.add_column(col)
    for lv in levels:
        rows: list[Perturbation | None] = [*lv.plan] or [None]
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


def catalog_rows(support: Support) -> list[dict[str, object]]:
    """Every fault type of the catalog with what ``support`` says of it: ``available`` (``yes``, ``no``,
    or ``partly`` when only some of its target kinds are refused) and the reason per refused target."""
    from mlsandbox.faultkinds import FAULT_MODELS, refusal

    rows: list[dict[str, object]] = []
    for model in FAULT_MODELS:
        kind = model.model_fields["type"].default
        refused = {t: why for t in model.targets if (why := refusal(kind, t, support)) is not None}
        reasons = list(dict.fromkeys(refused.values()))
        available = "no" if len(refused) == len(model.targets) else "partly" if refused else "yes"
        if available == "partly":
            reasons = [f"on {t} targets: {why}" for t, why in refused.items()]
        rows.append(
            {
                "type": kind,
                "category": model.category,
                "targets": list(model.targets),
                "parameters": {
                    k: "required" if v.is_required() else v.default
                    for k, v in model.model_fields.items()
                    if k != "type"
                },
                "available": available,
                "reasons": reasons,
                "description": " ".join((model.__doc__ or "").split()),
            }
        )
    return rows


@faults_app.command("catalog")
def faults_catalog(
    backend: Annotated[str, backend_option("The backend to ask", "-b")] = DEFAULT_BACKEND,
    name: OptionalNameOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Every fault type with its target kinds, parameters, and whether the backend can make it real here
    (asked of the backend without starting anything: binaries and cgroups on local, the cluster's Chaos
    Mesh on kube) and, if not, why."""
    try:
        chosen = get_backend(backend, name)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--backend") from None
    support = chosen.support()
    rows = catalog_rows(support)
    if as_json:
        typer.echo(json.dumps({"backend": support.backend, "faults": rows}, indent=2, default=str))
        return
    table = Table(title=f"fault catalog ({support.backend} backend)")
    for col in ("type", "category", "targets", "parameters", support.backend, "what happens"):
        table.add_column(col)
    marks = {"yes": "yes", "no": "[red]no[/]", "partly": "[yellow]partly[/]"}
    for row in rows:
        params = row["parameters"]
        assert isinstance(params, dict)
        table.add_row(
            str(row["type"]),
            str(row["category"]),
            ", ".join(row["targets"]),  # type: ignore[arg-type]
            ", ".join(f"{k} (required)" if v == "required" else f"{k}={v!r}" for k, v in params.items())
            or "-",
            marks[str(row["available"])],
            str(row["description"]),
        )
    console.print(table)
    for row in rows:
        for reason in row["reasons"]:  # type: ignore[attr-defined]
            console.print(f"[bold]{row['type']}[/] unavailable on {support.backend}: {escape(reason)}")
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
