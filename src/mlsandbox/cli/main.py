"""The ``mlsandbox`` command line: sandbox lifecycle, scenarios, and running agents."""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Annotated, Any

import typer
from rich.table import Table

from mlsandbox import __version__
from mlsandbox.cli.calibration import register as register_calibration_commands
from mlsandbox.cli.cluster import cluster_app
from mlsandbox.cli.common import (
    BackendOpt,
    LevelOpt,
    NameOpt,
    NoStartOpt,
    agent_help,
    human_bytes,
    make_console,
    with_level,
)
from mlsandbox.cli.console import console as console_command
from mlsandbox.cli.evaluation import register as register_eval_commands
from mlsandbox.cli.faults import register as register_fault_commands
from mlsandbox.cli.instances import register as register_instance_commands
from mlsandbox.cli.interfaces import register as register_interface_commands
from mlsandbox.cli.kube import kube_app
from mlsandbox.cli.operator import operator_app
from mlsandbox.cli.training import register as register_training_commands
from mlsandbox.cli.watch import watch as watch_command
from mlsandbox.errors import MLSandboxError, NotRunningError
from mlsandbox.terminal import print_error

app = typer.Typer(
    help="mlsandbox: a real-execution sandbox for ML-engineering agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
scenarios_app = typer.Typer(help="Built-in scenarios.", no_args_is_help=True)
app.add_typer(scenarios_app, name="scenarios")
register_interface_commands(app)  # serve (HTTP gateway), mcp, openenv, tools
register_fault_commands(app)  # curriculum show, faults catalog
register_eval_commands(app, scenarios_app)  # bench, replay, scenarios validate / suite
register_calibration_commands(app)  # calibrate, fidelity
register_instance_commands(app)  # tasks generate / freeze / show, export harbor
register_training_commands(app)  # train (MaskablePPO from scratch in sim, evaluated on held-out seeds)
app.add_typer(kube_app, name="kube")
app.add_typer(cluster_app, name="cluster")  # mlsandbox cluster up|down|status (make sandbox-up)
app.add_typer(operator_app, name="operator")
app.command("watch")(watch_command)  # live dashboard of an episode (mlsandbox.cli.watch)
app.command("console")(console_command)  # web console (mlsandbox.console)
console = make_console()
err_console = make_console(stderr=True)


def _version(value: bool) -> None:
    if value:
        console.print(f"mlsandbox {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """mlsandbox command line."""


def _fail(err: Exception) -> typer.Exit:
    print_error(err_console, err)
    return typer.Exit(code=1)


def _sigterm_as_interrupt() -> None:
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


# ------------------------------------------------------------------------------------------- lifecycle


def _backend(kind: str, name: str) -> Any:
    from mlsandbox.backends import get_backend

    try:
        return get_backend(kind, name)
    except (MLSandboxError, ValueError) as e:
        raise _fail(e) from None


@app.command()
def up(name: NameOpt = "default", backend: BackendOpt = "local") -> None:
    """Start the sandbox's services (local: MinIO, MLflow, Prefect server and worker), or attach to them
    when they run; on kube, check that the sandbox is ready."""
    _sigterm_as_interrupt()
    b = _backend(backend, name)
    t0 = time.perf_counter()
    what = " (MinIO, MLflow, Prefect)" if backend == "local" else f" on the {backend} backend"
    try:
        with console.status(f"starting sandbox [bold]{name}[/]{what} ..."):
            b.up()
    except MLSandboxError as e:
        raise _fail(e) from None
    console.print(f"sandbox [bold]{name}[/] up in {time.perf_counter() - t0:.1f} s")
    _print_status(b)


@app.command()
def down(name: NameOpt = "default", backend: BackendOpt = "local") -> None:
    """Stop everything the sandbox started (services, jobs) and remove its state."""
    b = _backend(backend, name)
    try:
        b.down()
    except MLSandboxError as e:
        raise _fail(e) from None
    console.print(f"sandbox [bold]{name}[/] is down")


@app.command()
def status(
    name: NameOpt = "default",
    backend: BackendOpt = "local",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Each service of the sandbox: state, URL, port, pid, RSS, uptime. Exits 1 when no sandbox of that
    name exists (``mlsandbox sandboxes`` lists them)."""
    b = _backend(backend, name)
    missing = _missing_sandbox(backend, name, b)
    if missing:
        raise _fail(MLSandboxError(missing))
    if as_json:
        console.print_json(json.dumps([s.model_dump() for s in b.status()]))
        return
    _print_status(b)


def _missing_sandbox(kind: str, name: str, b: Any) -> str | None:
    """Why the sandbox ``name`` of backend ``kind`` does not exist, or None when it does (or when the
    backend cannot list its sandboxes: then its status says)."""
    from mlsandbox.backends.registry import backend_type

    lister = backend_type(kind).sandboxes
    if lister is None or b.is_alive():
        return None
    names = [s.name for s in lister()]
    if name in names:
        return None
    known = f"sandboxes of the {kind} backend: {', '.join(names)}" if names else f"no {kind} sandbox exists"
    return f"no sandbox named {name!r} ({known}); start it with `mlsandbox up --name {name}`"


@app.command("sandboxes")
def sandboxes(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """The sandboxes known on this machine, of every backend that can list its own (nothing is probed)."""
    from mlsandbox.backends.registry import sandbox_listings

    rows = [{"backend": kind, **listing.model_dump(mode="json")} for kind, listing in sandbox_listings()]
    if as_json:
        console.print_json(json.dumps(rows))
        return
    if not rows:
        console.print("no sandbox (start one with `mlsandbox up --name NAME`)")
        return
    table = Table(title="sandboxes")
    for col in ("backend", "name", "phase", "services", "ephemeral", "owner pid", "started"):
        table.add_column(col, overflow="fold")
    for r in rows:
        services = {True: "[green]running[/]", False: "[red]some stopped[/]", None: "-"}[
            r["services_running"]
        ]
        owner = "-" if r["owner_pid"] is None else f"{r['owner_pid']}{'' if r['owner_alive'] else ' (gone)'}"
        started = (
            "-"
            if r["created_at"] is None
            else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created_at"]))
        )
        table.add_row(
            r["backend"],
            r["name"],
            r["phase"],
            services,
            "-" if r["ephemeral"] is None else ("yes" if r["ephemeral"] else "no"),
            owner,
            started,
        )
    console.print(table)


app.command("ls", hidden=True, help="The same as `mlsandbox sandboxes`.")(sandboxes)


def _print_status(backend: Any) -> None:
    rows = backend.status()
    table = Table(title=f"sandbox {backend.name}")
    where = any(s.detail for s in rows)  # kube: pod, node, restarts instead of a pid
    for col in ("service", "state", "url", "where" if where else "pid", "rss", "uptime"):
        table.add_column(col, overflow="fold")
    total = 0
    for s in rows:
        total += s.rss_bytes or 0
        color = {"running": "green", "starting": "yellow"}.get(s.state, "red")
        table.add_row(
            s.name,
            f"[{color}]{s.state}[/]",
            s.url or "-",
            (s.detail or "-") if where else str(s.pid or "-"),
            human_bytes(s.rss_bytes),
            "-" if s.uptime_s is None else f"{s.uptime_s:.0f} s",
        )
    if rows:
        table.add_row("[bold]total[/]", "", "", "", human_bytes(total) if total else "-", "")
    console.print(table)


@app.command()
def gc(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Remove what crashed runs left behind: sandboxes, processes, cgroups, faults, episode resources."""
    from mlsandbox.backends.kube import cluster_state
    from mlsandbox.backends.local.gc import GcItem, collect_garbage_report

    items = collect_garbage_report()
    # Local clusters, real nodes and control planes whose owner died (a node before its control plane).
    items += [GcItem(kind="control_plane", what=line) for line in cluster_state.collect_garbage()]
    if as_json:
        console.print_json(json.dumps([i.model_dump() for i in items]))
    else:
        if items:
            table = Table(title="removed by gc")
            for col in ("kind", "sandbox", "what", "detail"):
                table.add_column(col, overflow="fold")
            for i in items:
                detail = i.detail if i.ok else f"[red]FAILED: {i.detail}[/]"
                table.add_row(i.kind, i.sandbox or "-", i.what, detail)
            console.print(table)
        failed = sum(not i.ok for i in items)
        console.print(f"gc: {len(items)} item(s) removed{f', {failed} failed' if failed else ''}")
    if any(not i.ok for i in items):
        raise typer.Exit(1)


# ------------------------------------------------------------------------------------------- scenarios


@scenarios_app.command("list")
def scenarios_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    pack: Annotated[
        list[str] | None, typer.Option("--pack", help="Only the families of these packs (repeatable).")
    ] = None,
) -> None:
    """List the built-in scenarios (plug-in scenarios included)."""
    from mlsandbox.scenario import catalog_ids, load_builtin
    from mlsandbox.scenario.packs import pack_families

    rows: list[dict[str, Any]] = []
    broken: list[str] = []
    try:
        ids = pack_families(pack) if pack else catalog_ids()
    except MLSandboxError as e:
        raise _fail(e) from None
    for sid in ids:
        try:
            sc = load_builtin(sid)
        except MLSandboxError as e:  # a broken plug-in scenario is reported, the others still listed
            broken.append(str(e))
            continue
        kind, metric = sc.work()
        rows.append(
            {
                "id": sc.id,
                "difficulty": sc.difficulty,
                "kind": kind,
                "metric": metric,
                "title": sc.title,
                "max_steps": sc.max_steps,
                "credits": sc.budget.credits,
            }
        )
    if as_json:
        console.print_json(json.dumps(rows))
    else:
        table = Table(title="built-in scenarios")
        for col in ("id", "difficulty", "kind", "metric", "title", "max steps", "credits"):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(
                r["id"],
                str(r["difficulty"]),
                r["kind"],
                r["metric"],
                r["title"],
                str(r["max_steps"]),
                f"{r['credits']:g}",
            )
        console.print(table)
    for msg in broken:
        print_error(err_console, msg)


@scenarios_app.command("packs")
def scenarios_packs(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """The scenario packs: built-in families grouped by the business that would play them."""
    from mlsandbox.scenario import load_builtin
    from mlsandbox.scenario.packs import packs

    rows = []
    try:
        for p in packs().values():
            works = sorted({load_builtin(f).work()[0] for f in p.families})
            rows.append({**p.model_dump(mode="json"), "kinds": works})
    except MLSandboxError as e:
        raise _fail(e) from None
    if as_json:
        console.print_json(json.dumps(rows))
        return
    table = Table(title="scenario packs")
    for col in ("pack", "title", "kinds", "families", "business"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r["name"], r["title"], ", ".join(r["kinds"]), "\n".join(r["families"]), r["business"])
    console.print(table)


@scenarios_app.command("show")
def scenarios_show(scenario: Annotated[str, typer.Argument(help="Scenario id or YAML file.")]) -> None:
    """Show a scenario (as the sandbox parsed it)."""
    from mlsandbox.scenario import load_scenario

    try:
        sc = load_scenario(scenario)
    except MLSandboxError as e:
        raise _fail(e) from None
    console.print_json(sc.model_dump_json())


# ------------------------------------------------------------------------------------------------ run


@app.command()
def run(
    scenario: Annotated[
        str, typer.Option("--scenario", "-s", help="Scenario id or YAML file.")
    ] = "tabular-quality-basic",
    agent: Annotated[str, typer.Option("--agent", "-a", help=agent_help())] = "rule",
    seed: Annotated[
        int | None, typer.Option("--seed", help="Episode seed (default: the scenario's).")
    ] = None,
    episodes: Annotated[
        int, typer.Option("--episodes", min=1, help="Episodes to run (seeds seed, seed+1, ...).")
    ] = 1,
    name: NameOpt = "default",
    backend: BackendOpt = "local",
    no_start: NoStartOpt = False,
    level: LevelOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No step table.")] = False,
) -> None:
    """Run episodes of a scenario with an agent; starts a sandbox if none is running (unless --no-start)."""
    from mlsandbox.agents import make_agent
    from mlsandbox.agents.runner import StepRecord, run_episode
    from mlsandbox.env.gym_env import MLSandboxEnv
    from mlsandbox.scenario import load_scenario

    _sigterm_as_interrupt()
    try:
        sc = with_level(load_scenario(scenario), level)
        agent_name = sc.reference_agent if agent == "reference" else agent
        make_agent(agent_name)
        env = MLSandboxEnv(sc, backend=backend, sandbox=name, start_sandbox=not no_start)
        if no_start and not env.backend.is_alive():
            raise NotRunningError(
                f"sandbox {name!r} is not running (--no-start): start it with `mlsandbox up --name {name}`"
            )
    except (MLSandboxError, ValueError, NotImplementedError) as e:
        raise _fail(e) from None
    base_seed = sc.seed if seed is None else seed
    results = []
    try:
        if not env.backend.is_alive():
            what = "MinIO, MLflow, Prefect" if backend == "local" else f"{backend} backend"
            with console.status(f"starting sandbox [bold]{name}[/] ({what}) ..."):
                t0 = time.perf_counter()
                env.reset(seed=base_seed)  # starts the sandbox; the episode below starts fresh
            console.print(
                f"sandbox [bold]{name}[/] started in {time.perf_counter() - t0:.1f} s (stopped at the end)"
            )
        for i in range(episodes):
            ep_seed = base_seed + i
            where = sc.id if level is None else f"{sc.id} (level {level})"
            table = _step_table(f"{where} · agent {agent} · seed {ep_seed}")

            def on_step(rec: StepRecord, table: Table = table) -> None:
                table.add_row(*_step_row(rec))

            if quiet:
                res = run_episode(env, make_agent(agent_name, seed=ep_seed), seed=ep_seed, on_step=on_step)
            else:
                # The table grows in place as the episode runs (plain lines when not a terminal).
                from rich.live import Live

                with Live(table, console=console, refresh_per_second=4, vertical_overflow="visible"):
                    res = run_episode(
                        env, make_agent(agent_name, seed=ep_seed), seed=ep_seed, on_step=on_step
                    )
                if not console.is_terminal:
                    console.line()
            results.append(res)
            _print_breakdown(res)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted: cleaning up the episode and the sandbox it started[/]")
        env.close()
        raise typer.Exit(code=130) from None
    except MLSandboxError as e:
        env.close()
        raise _fail(e) from None
    env.close()
    if len(results) > 1:
        _print_summary(results)


def _step_table(title: str) -> Table:
    table = Table(title=title, show_lines=False)
    table.add_column("step", justify="right")
    table.add_column("action")
    table.add_column("observation")
    table.add_column("reward", justify="right")
    return table


def _short_action(action: Any) -> str:
    if isinstance(action, dict):
        params = {k: v for k, v in action.items() if k != "type"}
        inner = ", ".join(f"{k}={v}" for k, v in params.items() if k != "resources")
        return f"{action.get('type')}({inner})"
    return str(action)[:60]


def _short_observation(obs: dict[str, Any]) -> str:
    if not obs.get("ok"):
        err = obs.get("error") or {}
        return f"ERROR {err.get('code')}: {str(err.get('message'))[:70]}"
    r = obs.get("result") or {}
    action = obs.get("action")
    if action == "check_data_quality":
        p = r.get("profile") or {}
        cols = list((p.get("column_profiles") or {}).values())
        outliers = sum(int(c.get("outliers") or 0) for c in cols)
        balance = (p.get("target") or {}).get("minority_share")
        return f"{p.get('rows')} rows, {p.get('missing_cells')} missing cells, {outliers} outliers, minority {balance}"
    if action == "clean_dataset":
        return f"wrote {r.get('dataset')} ({r.get('rows')} rows)"
    if action in ("train_model", "wait"):
        jobs = r.get("jobs")
        return (
            ", ".join(f"{j['job_id']} {j['state']}" for j in jobs)
            if jobs
            else f"{r.get('job_id')} {r.get('state')}"
        )
    if action == "get_job":
        extra = f" val_auc={r['metrics'].get('val_auc')}" if r.get("metrics") else ""
        return f"{r.get('job_id')} {r.get('state')} cpu={r.get('cpu_seconds')}s{extra}"
    if action == "register_model":
        return f"registered {r.get('name')} v{r.get('version')}"
    if action == "list_datasets":
        return f"{len(r.get('datasets', []))} datasets"
    if action == "list_runs":
        return f"{len(r.get('runs', []))} runs"
    if action == "submit":
        return "submitted"
    return json.dumps(r)[:70]


def _step_row(rec: Any) -> list[str]:
    return [
        str(rec.step),
        _short_action(rec.action),
        _short_observation(rec.observation),
        f"{rec.reward:+.3f}",
    ]


def _print_breakdown(res: Any) -> None:
    table = Table(title="reward breakdown")
    table.add_column("component")
    table.add_column("total", justify="right")
    for k, v in res.components.items():
        table.add_row(k, f"{v:+.3f}")
    table.add_row("[bold]reward[/]", f"[bold]{res.total_reward:+.3f}[/]")
    console.print(table)
    g = res.grade or {}
    outcome = "[green]success[/]" if res.success else "[red]not solved[/]"
    console.print(
        f"{outcome}: {g.get('reason', '-')} · {len(res.steps)} steps · {res.invalid_actions} invalid · "
        f"{res.wall_s:.1f} s wall"
    )


def _print_summary(results: list[Any]) -> None:
    table = Table(title="episodes")
    for col in ("seed", "reward", "success", "steps", "invalid", "holdout AUC", "wall s"):
        table.add_column(col, justify="right")
    for r in results:
        auc = (r.grade or {}).get("holdout_auc")
        table.add_row(
            str(r.seed),
            f"{r.total_reward:+.3f}",
            "yes" if r.success else "no",
            str(len(r.steps)),
            str(r.invalid_actions),
            "-" if auc is None else f"{auc:.4f}",
            f"{r.wall_s:.1f}",
        )
    console.print(table)


@app.command("plugins")
def plugins_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Installed plug-ins (entry points in the mlsandbox.* groups): origin and status."""
    from mlsandbox import plugins

    records = plugins.discover()
    if as_json:
        console.print_json(json.dumps([r.as_dict() for r in records]))
        return
    if not records:
        console.print("no plug-ins installed (entry-point groups: " + ", ".join(plugins.GROUPS) + ")")
        return
    table = Table(title="plug-ins")
    for col in ("group", "name", "origin", "status", "detail"):
        table.add_column(col, overflow="fold")
    for r in records:
        color = {"ok": "green", "error": "red"}.get(r.status, "yellow")
        table.add_row(r.group, r.name, r.origin, f"[{color}]{r.status}[/]", r.detail or r.value)
    console.print(table)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]")
        sys.exit(130)


if __name__ == "__main__":
    main()
