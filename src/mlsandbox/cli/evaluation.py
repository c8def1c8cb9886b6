"""Evaluation commands: ``bench``, ``replay``, ``scenarios validate`` and ``scenarios suite``."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    pass

from mlsandbox.cli.common import (
    BackendOpt,
    LevelOpt,
    NameOpt,
    NoStartOpt,
    agent_help,
    make_console,
    with_level,
)
from mlsandbox.terminal import print_error

console = make_console()
err_console = make_console(stderr=True)


def _fail(msg: Any) -> typer.Exit:
    print_error(err_console, msg)
    return typer.Exit(code=1)


def _progress(*, to_stderr: bool = False) -> Any:
    """Progress on stdout, or on stderr when stdout carries JSON."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=err_console if to_stderr else console,
    )


def _env(name: str, backend: str, *, no_start: bool = False) -> Any:
    from mlsandbox.env.gym_env import MLSandboxEnv
    from mlsandbox.errors import MLSandboxError, NotRunningError

    try:
        env = MLSandboxEnv(backend=backend, sandbox=name, start_sandbox=not no_start)
        if no_start and not env.backend.is_alive():
            raise NotRunningError(
                f"sandbox {name!r} is not running (--no-start): start it with `mlsandbox up --name {name}`"
            )
    except (MLSandboxError, ValueError, NotImplementedError) as e:
        raise _fail(e) from None
    return env


def _pass_k_text(g: Any) -> str:
    """pass@k / pass^k at the largest k the group's episodes allow (k = episodes per task)."""
    k = str(g.episodes_per_task)
    if k not in g.pass_at_k:
        return "-"
    return f"{g.pass_at_k[k]:.2f} / {g.pass_all_k[k]:.2f} (k={k})"


def _summary_tables(rows: list[Any]) -> list[Table]:
    from mlsandbox.evaluation.results import leaderboard, summarize

    agents, families = summarize(rows)
    t1 = Table(title="leaderboard (95% confidence intervals)")
    for col in (
        "agent",
        "episodes",
        "success rate",
        "pass@k / pass^k",
        "mean reward",
        "credits",
        "TTD steps",
        "invalid actions",
        "harness errors",
    ):
        t1.add_column(col, justify="left" if col == "agent" else "right", overflow="fold")
    for g in leaderboard(agents):
        s, r = g.success(), g.reward()
        t1.add_row(
            g.agent,
            str(g.episodes),
            escape(s.text("{:.2f}")),
            _pass_k_text(g),
            escape(r.text("{:+.2f}")),
            f"{g.mean_credits:.2f}",
            "-" if g.mean_time_to_detect_steps is None else f"{g.mean_time_to_detect_steps:.1f}",
            str(g.invalid_actions),
            str(g.errors),
        )
    t2 = Table(title="per scenario family")
    for col in ("family", "agent", "episodes", "success rate", "pass@k / pass^k", "mean reward"):
        t2.add_column(col, justify="left" if col in ("family", "agent") else "right", overflow="fold")
    for g in families:
        t2.add_row(
            g.family or "",
            g.agent,
            str(g.episodes),
            escape(g.success().text("{:.2f}")),
            _pass_k_text(g),
            escape(g.reward().text("{:+.2f}")),
        )
    return [t1, t2]


def _kind_of(scenario: Any) -> str:
    """The kind of work of a scenario: its goal dataset's ``kind``."""
    try:
        return str(getattr(scenario.dataset(scenario.goal.dataset), "kind", "tabular"))
    except KeyError:
        return "tabular"


def frozen_entries(
    suite: str, splits: list[str] | None, test_file: Path | None, *, families: list[str] | None
) -> list[Any]:
    """A frozen suite's instances as suite entries (split = the instance's split)."""
    from mlsandbox.instances.splits import SPLITS, load_split, test_seed_from_env
    from mlsandbox.scenario.suites import SuiteEntry

    chosen = splits or ["train", "dev", *(["test"] if test_file or test_seed_from_env() is not None else [])]
    unknown = [s for s in chosen if s not in SPLITS]
    if unknown:
        raise ValueError(f"unknown split(s) {', '.join(unknown)}; splits: {', '.join(SPLITS)}")
    entries = []
    for name in chosen:
        for inst, sc in load_split(suite, name, test_file=test_file):  # type: ignore[arg-type]
            if families and inst.family not in families:
                continue
            entries.append(SuiteEntry(inst.family, name, sc))
    return entries


def _split_table(rows: list[Any]) -> Table:
    from mlsandbox.evaluation.results import summarize_splits

    t = Table(title="per split and kind of work")
    for col in ("split", "kind", "agent", "tasks", "episodes", "success rate", "pass@k / pass^k"):
        t.add_column(col, justify="left" if col in ("split", "kind", "agent") else "right", overflow="fold")
    for g in summarize_splits(rows):
        t.add_row(
            g.split or "",
            g.kind or "",
            g.agent,
            str(g.tasks),
            str(g.episodes),
            escape(g.success().text("{:.2f}")),
            _pass_k_text(g),
        )
    return t


def _validate_spaces(ids: list[str], n: int, results: list[dict[str, Any]]) -> list[str]:
    """Gate ``n`` instances of every family with a parameter space; the families with a failing instance
    (each reported with its parameters and reason)."""
    from mlsandbox.instances.generate import Gates
    from mlsandbox.instances.space_check import check_space
    from mlsandbox.scenario import load_scenario

    families = {sid: sc for sid, sc in zip(ids, map(load_scenario, ids), strict=True) if sc.space is not None}
    if not families:
        return []
    failed: list[str] = []
    with Gates() as gates, _progress(to_stderr=True) as progress:
        bar = progress.add_task("instances", total=n * len(families), status="")
        for sid, fam in families.items():
            rejected = check_space(
                fam, n, gates=gates, on_result=lambda r: progress.update(bar, advance=1, status=r.id)
            )
            if rejected:
                failed.append(sid)
                err_console.print(
                    f"[red]{sid}[/]: {len(rejected)} of {n} instances drawn from its space fail the gates"
                )
                for r in rejected:
                    err_console.print(f"  {r.id} ({r.gate}): {r.reason}\n    params {json.dumps(r.params)}")
                results.append(
                    {
                        "scenario": sid,
                        "loads": True,
                        "problem": "instances of its parameter space fail the gates",
                        "rejected_instances": [r.model_dump(mode="json") for r in rejected],
                    }
                )
    return failed


def register(app: typer.Typer, scenarios_app: typer.Typer) -> None:
    @app.command()
    def bench(
        suite: Annotated[
            str, typer.Option("--suite", help="builtin | train | test, or a frozen suite (e.g. mle-core-v1)")
        ] = "test",
        split: Annotated[
            list[str] | None,
            typer.Option(
                "--split",
                help="A frozen suite's splits (repeatable; default train and dev, and test when "
                "MLSANDBOX_TEST_SEED or --test-file gives it).",
            ),
        ] = None,
        test_file: Annotated[
            Path | None,
            typer.Option("--test-file", help="A frozen suite's test split file (tasks freeze --split test)."),
        ] = None,
        agent: Annotated[
            list[str] | None,
            typer.Option("--agent", "-a", help=agent_help("Agent (repeatable; default rule and random)")),
        ] = None,
        episodes: Annotated[
            int, typer.Option("--episodes", min=1, help="Episodes per scenario and agent.")
        ] = 1,
        seed: Annotated[
            int | None,
            typer.Option(
                "--seed",
                help="Episode seed, absolute as in run: episode k of every scenario uses seed S + k "
                "(default: each scenario's own seed + k).",
            ),
        ] = None,
        scenario: Annotated[
            list[str] | None,
            typer.Option(
                "--scenario",
                "-s",
                help="Only these scenarios, ids or YAML files (repeatable; replaces --suite/--family).",
            ),
        ] = None,
        family: Annotated[
            list[str] | None,
            typer.Option("--family", "-f", help="Only these scenario families (repeatable)."),
        ] = None,
        pack: Annotated[
            list[str] | None,
            typer.Option("--pack", help="Only the families of these packs (repeatable; scenarios packs)."),
        ] = None,
        variants: Annotated[
            int | None, typer.Option("--variants", min=1, help="Variants per family (train/test suites).")
        ] = None,
        max_difficulty: Annotated[int | None, typer.Option("--max-difficulty", min=1, max=4)] = None,
        level: LevelOpt = None,
        out: Annotated[Path | None, typer.Option("--out", "-o", help="Output directory.")] = None,
        trajectories: Annotated[
            bool, typer.Option("--trajectories/--no-trajectories", help="Record every episode as JSONL.")
        ] = True,
        name: NameOpt = "default",
        backend: BackendOpt = "local",
        no_start: NoStartOpt = False,
        as_json: Annotated[
            bool,
            typer.Option(
                "--json", help="Print the summary (summary.json) on stdout; progress goes to stderr."
            ),
        ] = False,
    ) -> None:
        """Run agents on a scenario suite: JSONL rows, CSV, summary with 95% CIs, an HTML report."""
        from mlsandbox.agents import make_agent
        from mlsandbox.agents.bench import plan_episodes, run_bench
        from mlsandbox.errors import MLSandboxError
        from mlsandbox.evaluation.provenance import provenance
        from mlsandbox.evaluation.report import render_html
        from mlsandbox.evaluation.results import rows_csv, summary_json
        from mlsandbox.instances.splits import suite_ids as frozen_suite_ids
        from mlsandbox.scenario import load_scenario
        from mlsandbox.scenario.suites import SuiteEntry
        from mlsandbox.scenario.suites import suite as load_suite

        agents = agent or ["rule", "random"]
        try:
            if pack:
                from mlsandbox.scenario.packs import pack_families

                chosen = pack_families(pack)
                family = [f for f in chosen if f in family] if family else chosen
            for a in agents:
                if a != "reference":  # the scenario's own reference solution, made per episode
                    make_agent(a)
            if scenario:
                suite = "custom"
                entries = [SuiteEntry(sc.id, "custom", sc) for sc in map(load_scenario, scenario)]
            elif suite in frozen_suite_ids():
                entries = frozen_entries(suite, split, test_file, families=family)
            else:
                entries = load_suite(
                    suite, families=family, variants_per_family=variants, max_difficulty=max_difficulty
                )
            if level is not None:
                entries = [SuiteEntry(e.family, e.split, with_level(e.scenario, level)) for e in entries]
        except (ValueError, MLSandboxError) as e:
            raise _fail(e) from None
        if not entries:
            raise _fail("the selection has no scenario")
        tasks = plan_episodes(entries, agents, episodes=episodes, base_seed=seed, suite=suite)
        out_dir = out or Path("bench-results") / datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        out_dir.mkdir(parents=True, exist_ok=True)
        traj_dir = out_dir / "trajectories" if trajectories else None
        env = _env(name, backend, no_start=no_start)
        run_info = provenance()
        stamp = {"version": run_info["version"], "commit": run_info["commit"]}
        rows: list[Any] = []
        t0 = time.perf_counter()
        jsonl = (out_dir / "results.jsonl").open("w")
        try:
            with _progress(to_stderr=as_json) as progress:
                bar = progress.add_task(f"bench {suite}", total=len(tasks), status="")

                def on_step(task: Any, rec: Any) -> None:
                    progress.update(
                        bar, status=f"{task.entry.id} · {task.agent} · seed {task.seed} · step {rec.step}"
                    )

                kinds = {t.entry.id: _kind_of(t.entry.scenario) for t in tasks}
                for row in run_bench(env, tasks, trajectories=traj_dir, on_step=on_step):
                    row.extra.setdefault("mlsandbox", stamp)  # each row says what produced it
                    row.extra.setdefault("kind", kinds.get(row.scenario, "tabular"))
                    rows.append(row)
                    jsonl.write(row.model_dump_json() + "\n")
                    jsonl.flush()
                    mark = (
                        "[green]ok[/]" if row.success else ("[red]error[/]" if row.error else "[yellow]no[/]")
                    )
                    progress.console.print(
                        f"{row.scenario} · {row.agent} · seed {row.seed}: {mark} reward {row.reward:+.2f}"
                        f" · {row.steps} steps · {row.wall_s:.1f} s"
                    )
                    progress.advance(bar)
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted: writing what has run[/]")
        finally:
            jsonl.close()
            env.close()
        if not rows:
            raise _fail("no episode ran")
        (out_dir / "results.csv").write_text(rows_csv(rows))
        summary = summary_json(rows, provenance=run_info)
        (out_dir / "summary.json").write_text(summary)
        meta = {
            "suite": suite,
            "agents": ", ".join(agents),
            "episodes": episodes,
            "seed": "each scenario's own" if seed is None else seed,
            "backend": backend,
            "level": level or "-",
        }
        (out_dir / "report.html").write_text(
            render_html(
                rows,
                title=f"mlsandbox benchmark: suite {suite}",
                meta=meta,
                provenance=run_info,
                base=out_dir,
            )
        )
        if as_json:
            print(summary)
        else:
            for t in _summary_tables(rows):
                console.print(t)
            if len({r.split for r in rows}) > 1 or any(r.split in ("train", "dev") for r in rows):
                console.print(_split_table(rows))
        (err_console if as_json else console).print(
            f"{len(rows)} episodes in {time.perf_counter() - t0:.0f} s · results in [bold]{out_dir}[/]"
            " (results.jsonl, results.csv, summary.json, report.html"
            + (", trajectories/)" if trajectories else ")")
        )

    @app.command()
    def replay(
        file: Annotated[Path, typer.Argument(help="A trajectory file (JSONL) written by bench or run.")],
        delay: Annotated[float, typer.Option("--delay", min=0, help="Seconds between steps.")] = 0.0,
        step: Annotated[
            int | None,
            typer.Option("--step", help="Show only this step (its total is the running total up to it)."),
        ] = None,
        max_chars: Annotated[int, typer.Option("--max-chars", min=80, help="Cut long observations.")] = 2000,
    ) -> None:
        """Re-render a recorded episode step by step (the text an LLM agent reads)."""
        from mlsandbox.agents.trajectory import read_trajectory, replay_lines

        try:
            records = read_trajectory(file)
        except ValueError as e:
            raise _fail(e) from None
        if step is not None and not any(
            r.get("kind") == "step" and r.get("step") == step for r in records[1:]
        ):
            raise _fail(f"{file}: no step {step}")
        for i, block in enumerate(replay_lines(records, max_chars=max_chars, only_step=step)):
            if i and delay:
                time.sleep(delay)
            # soft_wrap: the terminal wraps long lines; the text itself is never cut or broken.
            console.print(block, markup=False, highlight=False, soft_wrap=True)
            console.print()

    @scenarios_app.command("validate")
    def scenarios_validate(
        scenario: Annotated[
            list[str] | None,
            typer.Argument(help="Scenario ids or YAML files (default: every built-in scenario)."),
        ] = None,
        load_only: Annotated[
            bool, typer.Option("--load-only", help="Only load and check; run no episode.")
        ] = False,
        seed: Annotated[
            int | None, typer.Option("--seed", help="Episode seed (default: the scenario's).")
        ] = None,
        instances: Annotated[
            int,
            typer.Option(
                "--instances",
                min=0,
                help="For a family with a parameter space: gate this many of its instances in sim (the "
                "reference agent succeeds, random and no-op agents fail); 0: none.",
            ),
        ] = 3,
        name: NameOpt = "default",
        backend: BackendOpt = "local",
        no_start: NoStartOpt = False,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print JSON instead of a table (progress on stderr).")
        ] = False,
    ) -> None:
        """Check that scenarios load and that their reference solution solves them (real episodes); for
        a family with a parameter space, also that instances drawn from it pass the validity gates."""
        from mlsandbox.agents.validate import check_loads, validate_scenario
        from mlsandbox.scenario import catalog_ids

        ids = scenario or catalog_ids()
        problems = check_loads(ids)
        table = Table(title="scenario validation")
        for col in ("scenario", "difficulty", "loads", "reference", "solved", "reward", "steps", "wall s"):
            table.add_column(
                col, justify="left" if col in ("scenario", "reference") else "right", overflow="fold"
            )
        failed = sorted(problems)
        loaded = [i for i in ids if i not in problems]
        for sid, msg in problems.items():
            err_console.print(f"[red]{sid}[/]: {msg}")
        results: list[dict[str, Any]] = [
            {"scenario": sid, "loads": False, "problem": msg} for sid, msg in problems.items()
        ]
        if instances and not load_only:
            space_failed = _validate_spaces(loaded, instances, results)
            failed += space_failed
            loaded = [i for i in loaded if i not in space_failed]
        if load_only:
            if as_json:
                results += [{"scenario": sid, "loads": True, "problem": None} for sid in loaded]
                print(json.dumps(results, indent=2))
            else:
                console.print(
                    f"{len(loaded)} of {len(ids)} scenarios load and name a usable reference solution"
                )
            raise typer.Exit(code=1 if failed else 0)
        env = _env(name, backend, no_start=no_start)
        try:
            with _progress(to_stderr=as_json) as progress:
                bar = progress.add_task("validate", total=len(loaded), status="")
                for sid in loaded:

                    def on_step(rec: Any, sid: str = sid) -> None:
                        progress.update(bar, status=f"{sid} · step {rec.step}")

                    v = validate_scenario(env, sid, seed=seed, on_step=on_step)
                    results.append({"loads": True, "problem": None, **dataclasses.asdict(v)})
                    table.add_row(
                        sid,
                        str(v.difficulty),
                        "yes",
                        v.reference,
                        "[green]yes[/]" if v.solved else f"[red]no[/] {v.reason}",
                        f"{v.reward:+.2f}",
                        str(v.steps),
                        f"{v.wall_s:.1f}",
                    )
                    if not v.solved:
                        failed.append(sid)
                    progress.advance(bar)
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted[/]")
            raise typer.Exit(code=130) from None
        finally:
            env.close()
        if as_json:
            print(json.dumps(results, indent=2))
        else:
            console.print(table)
        if failed:
            raise _fail(f"{len(failed)} scenario(s) failed: {', '.join(failed)}")
        console.print(
            f"[green]all {len(loaded)} scenarios load and are solved by their reference solution[/]"
        )

    @scenarios_app.command("suite")
    def scenarios_suite(
        suite: Annotated[str, typer.Argument(help="builtin | train | test")],
        variants: Annotated[int | None, typer.Option("--variants", min=1)] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="Every scenario in full, as JSON lines.")
        ] = False,
    ) -> None:
        """List the scenarios of a suite (procedurally generated variants for train and test)."""
        from mlsandbox.scenario.suites import suite as load_suite

        try:
            entries = load_suite(suite, variants_per_family=variants)
        except ValueError as e:
            raise _fail(e) from None
        if as_json:
            for entry in entries:
                print(
                    json.dumps(
                        {
                            "family": entry.family,
                            "split": entry.split,
                            "scenario": entry.scenario.model_dump(mode="json"),
                        }
                    )
                )
            return
        table = Table(title=f"suite {suite}: {len(entries)} scenarios")
        for col in ("scenario", "family", "difficulty", "seed", "faults"):
            table.add_column(col, overflow="fold")
        for entry in entries:
            faults = ", ".join(p.fault.type for p in entry.scenario.perturbations) or "-"
            table.add_row(entry.id, entry.family, str(entry.difficulty), str(entry.scenario.seed), faults)
        console.print(table)
