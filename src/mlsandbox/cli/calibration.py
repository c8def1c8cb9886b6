"""Calibration and fidelity commands: ``calibrate`` (the sweep of real runs and the fit the ``sim``
backend ships) and ``fidelity`` (the same agents and seeds on two backends, compared)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

if TYPE_CHECKING:
    from rich.progress import Progress

from mlsandbox.cli.common import backend_option, make_console
from mlsandbox.terminal import print_error

console = make_console()
err_console = make_console(stderr=True)


def _fail(msg: Any) -> typer.Exit:
    print_error(err_console, msg)
    return typer.Exit(code=1)


def _progress() -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
    )


def default_records() -> Path:
    from mlsandbox import paths
    from mlsandbox.data.tabular import GENERATOR_VERSION

    return paths.home() / "calibration" / f"records-g{GENERATOR_VERSION}.jsonl"


def register(app: typer.Typer) -> None:
    @app.command("fit-store")
    def fit_store(
        clear: Annotated[bool, typer.Option("--clear", help="Remove every kept fit.")] = False,
    ) -> None:
        """The sim backend's fit store: real fits kept on disk, shared by every process and run (where it
        is, how many fits, how much room; ``--clear`` empties it)."""
        from mlsandbox.backends.sim import fitstore

        directory = fitstore.default_directory()
        if directory is None:
            console.print(f"the fit store is off (${fitstore.STORE_ENV}=off): fits are kept in memory only")
            return
        try:
            store = fitstore.FitStore(directory)
        except OSError as e:
            raise _fail(e) from None
        if clear:
            console.print(f"removed {store.clear()} fits from {store.directory}")
            return
        files, size = store.size()
        console.print(
            f"{store.directory}: {files} fits, {size / 2**20:,.1f} MiB of {store.max_bytes / 2**20:,.0f} MiB "
            f"(fingerprint {fitstore.fingerprint()}; ${fitstore.STORE_ENV} moves it, off turns it off)"
        )

    @app.command()
    def calibrate(
        records: Annotated[
            Path | None,
            typer.Option(
                "--records",
                help="The sweep's raw records (JSONL; appended to, so a stopped sweep resumes). "
                "Default: $MLSANDBOX_HOME/calibration/records-g<generator version>.jsonl.",
            ),
        ] = None,
        quick: Annotated[bool, typer.Option("--quick", help="A small sweep (a smoke run, minutes).")] = False,
        section: Annotated[
            list[str] | None,
            typer.Option(
                "--section",
                help="Only these parts of the sweep (repeatable): job, fit, serving, flow, kinds. "
                "`fit` alone runs in this process, without a sandbox (a provisional calibration); "
                "`kinds` alone (jobs of every kind of work but binary classification) fits only their "
                "resources into the shipped calibration.",
            ),
        ] = None,
        fit_only: Annotated[
            bool, typer.Option("--fit-only", help="Fit from the records without measuring anything.")
        ] = False,
        no_fit: Annotated[bool, typer.Option("--no-fit", help="Measure only; do not fit.")] = False,
        redo: Annotated[
            bool,
            typer.Option("--redo", help="Measure the chosen sections again (new records replace old ones)."),
        ] = False,
        out: Annotated[
            Path | None,
            typer.Option(
                "--out", help="Where to write the fitted calibration (default: the one the package ships)."
            ),
        ] = None,
        backend: Annotated[str, backend_option("The backend the sweep measures")] = "local",
        name: Annotated[str, typer.Option("--name", "-n", help="Sandbox name for the sweep.")] = "calibrate",
    ) -> None:
        """Calibrate the simulator: measure real jobs, fits, serving and flows (resumable), then fit."""
        from mlsandbox.calibration.plan import SECTIONS, build_plan
        from mlsandbox.calibration.sweep import run_sweep

        path = records or default_records()
        sections = tuple(section or SECTIONS)
        if not fit_only:
            try:
                points = build_plan(quick=quick, sections=sections)
            except ValueError as e:
                raise _fail(e) from None
            console.print(f"calibration sweep: {len(points)} points -> {path}")
            with _progress() as progress:
                task = progress.add_task("sweep", total=None, status="")

                def on_progress(i: int, n: int, label: str) -> None:
                    progress.update(task, total=n, completed=i, status=label)

                try:
                    summary = run_sweep(
                        points,
                        path,
                        backend=backend,
                        sandbox=name,
                        quick=quick,
                        on_progress=on_progress,
                        redo=redo,
                    )
                except KeyboardInterrupt:
                    err_console.print("interrupted: the records so far are kept; run again to resume")
                    raise typer.Exit(code=130) from None
            console.print(
                f"measured {summary.measured} point(s) in {summary.seconds:.0f} s "
                f"({summary.done_before} already recorded)"
            )
            for line in summary.failed_points:
                err_console.print(f"  point failed: {line}")
        if no_fit:
            return
        _fit(path, out, tasks_only=set(sections) == {"kinds"})

    @app.command()
    def fidelity(
        scenarios: Annotated[
            list[str] | None,
            typer.Option(
                "--scenarios", "--scenario", "-s", help="Scenarios (repeatable; default: every built-in one)."
            ),
        ] = None,
        seeds: Annotated[
            int, typer.Option("--seeds", min=1, help="Episodes (seeds) per scenario and agent.")
        ] = 1,
        agents: Annotated[
            list[str] | None,
            typer.Option(
                "--agents", "--agent", "-a", help="Agents (repeatable; default: rule, reference, random)."
            ),
        ] = None,
        base_seed: Annotated[
            int, typer.Option("--base-seed", help="Episode k uses scenario seed + base + k.")
        ] = 0,
        out: Annotated[
            Path | None, typer.Option("--out", help="Output directory (default: fidelity-results/<time>).")
        ] = None,
        real: Annotated[str, backend_option("The real backend")] = "local",
        simulated: Annotated[str, typer.Option("--sim", help="The simulated backend.")] = "sim",
        name: Annotated[
            str, typer.Option("--name", "-n", help="Sandbox name on both backends.")
        ] = "fidelity",
        probe: Annotated[
            bool,
            typer.Option(
                "--probe",
                help="Off-path probes: every probe of mlsandbox.agents.probes (extreme and tiny "
                "hyperparameters, each algorithm, cleaning left out or reordered, the wrong dataset) with "
                "the random and rule agents, on every family that trains and grades a model (unless "
                "--scenarios/--agents say otherwise).",
            ),
        ] = False,
    ) -> None:
        """Run the same agents and seeds on a real and a simulated backend and compare: success, reward per
        component, holdout AUC, steps, job durations, where trajectories diverge (JSON + HTML per scenario).
        With --probe, the agents leave the scripted path and the table shows success flips and the
        holdout AUC error's p50 / p90 / max."""
        from mlsandbox.fidelity.run import AGENTS, PROBE_AGENTS, model_families
        from mlsandbox.fidelity.suite import run_fidelity
        from mlsandbox.scenario import load_scenario
        from mlsandbox.scenario.loader import catalog_ids

        chosen = list(scenarios or (model_families() if probe else catalog_ids()))
        try:
            for sid in chosen:
                load_scenario(sid)
        except Exception as e:
            raise _fail(e) from None
        who = tuple(agents or (PROBE_AGENTS if probe else AGENTS))
        target = out or Path("fidelity-results") / time.strftime("%Y%m%d-%H%M%S")
        total = len(chosen) * seeds * len(who)
        with _progress() as progress:
            task = progress.add_task("fidelity", total=total, status="")

            def on_triple(t: Any) -> None:
                verdict = "agree" if t.success_agrees else "DISAGREE"
                progress.update(task, advance=1, status=f"{t.scenario} {t.agent} {t.seed}: {verdict}")

            try:
                index = run_fidelity(
                    chosen, target, seeds=seeds, agents=who, base_seed=base_seed,
                    backends=(real, simulated), sandbox=name, on_triple=on_triple,
                )  # fmt: skip
            except KeyboardInterrupt:
                err_console.print(f"interrupted: pages of the finished scenarios are in {target}")
                raise typer.Exit(code=130) from None
        table = Table(title=f"fidelity: {real} against {simulated}")
        for col in (
            "scenario",
            "triples",
            "success agreement",
            "flips (by margin)",
            "|AUC diff| p50 / p90 / max",
            "reward diff",
            "diverged",
            "KS job time",
        ):
            table.add_column(col, justify="left" if col == "scenario" else "right")
        rows = [*index.scenarios.items(), ("overall", index.figures)]

        def num(x: float | None) -> str:
            return "-" if x is None else f"{x:.4f}"

        for sid, f in rows:
            table.add_row(
                sid,
                f"{f.comparable}/{f.triples}",
                "-" if f.success_agreement is None else f"{f.success_agreement:.0%}",
                f"{f.success_flips} ({f.flips_by_margin})",
                f"{num(f.median_abs_auc_diff)} / {num(f.p90_abs_auc_diff)} / {num(f.max_abs_auc_diff)}",
                "-" if f.mean_reward_diff is None else f"{f.mean_reward_diff:+.2f}",
                str(f.diverged),
                "-" if f.job_duration_ks is None else f"{f.job_duration_ks:.2f}",
            )
        console.print(table)
        kinds = Table(title="per kind of work")
        for col in (
            "kind",
            "triples",
            "success agreement",
            "metric",
            "|metric diff| p50 / max",
            "rel. error p50",
        ):
            kinds.add_column(col, justify="left" if col in ("kind", "metric") else "right")
        for kind, k in index.kinds.items():
            kinds.add_row(
                kind,
                f"{k.comparable}/{k.triples}",
                "-" if k.success_agreement is None else f"{k.success_agreement:.0%}",
                ", ".join(k.metrics),
                f"{num(k.median_abs_metric_diff)} / {num(k.max_abs_metric_diff)}",
                "-" if k.median_rel_metric_error is None else f"{k.median_rel_metric_error:.1%}",
            )
        console.print(kinds)
        console.print(f"report: {target / 'index.html'}")


def _fit(path: Path, out: Path | None, tasks_only: bool = False) -> None:
    """Fit the records into a calibration (``tasks_only``: only its per-task job resources, into the
    shipped calibration, from a sweep of the ``kinds`` section alone)."""
    from mlsandbox.calibration.fit import fit_calibration, fit_task_section, write_calibration

    if not path.exists():
        raise _fail(f"no calibration records at {path}: run `mlsandbox calibrate` first")
    t0 = time.perf_counter()
    try:
        calibration, report = fit_task_section(path) if tasks_only else fit_calibration(path)
    except ValueError as e:
        raise _fail(e) from None
    target = write_calibration(calibration, out)
    table = Table(title=f"calibration fitted in {time.perf_counter() - t0:.1f} s")
    table.add_column("figure", justify="left")
    table.add_column("value", justify="right")
    for key, value in report.items():
        if isinstance(value, dict):
            value = ", ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in value.items()
            )
        table.add_row(key, value if isinstance(value, str) else f"{value:.4g}")
    console.print(table)
    console.print(f"written to {target}")


__all__ = ["register"]
