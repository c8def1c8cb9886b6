"""``mlsandbox cluster up|down|status``: a local cluster running the sandbox, left running
(:mod:`mlsandbox.k8s_operator.local_cluster`). ``make sandbox-up`` / ``make sandbox-down`` call it.

Wired into the main CLI with ``app.add_typer(cluster_app, name="cluster")``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from mlsandbox.cli.common import human_bytes, make_console
from mlsandbox.errors import MLSandboxError
from mlsandbox.terminal import print_error

cluster_app = typer.Typer(
    help="A local Kubernetes cluster running the sandbox: kind where Docker can run it, else a real node "
    "of this machine (root).",
    no_args_is_help=True,
)
console = make_console()
err_console = make_console(stderr=True)

ClusterNameOpt = Annotated[
    str | None,
    typer.Option("--name", envvar="MLSANDBOX_CLUSTER", help="The cluster's name (default: mlsandbox)."),
]


def _rich_progress() -> Any:
    """Each step: a spinner while it runs, then a line with its duration; what it says, dimmed, above."""
    from mlsandbox.k8s_operator.local_cluster import Progress

    class RichProgress(Progress):
        @contextlib.contextmanager
        def step(self, title: str) -> Iterator[None]:
            began = time.monotonic()
            with console.status(f"[bold]{title}[/] ..."):
                try:
                    yield
                except BaseException:
                    console.print(f"[red]✗[/] {title} ({time.monotonic() - began:.1f} s)", highlight=False)
                    raise
            self.timings[title] = round(time.monotonic() - began, 1)
            console.print(f"[green]✓[/] {title} [dim]({self.timings[title]:.1f} s)[/]", highlight=False)

    return RichProgress(lambda line: console.print(f"    [dim]{escape(line)}[/]", highlight=False))


def _interrupt_on_sigterm() -> None:
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


@cluster_app.command("up")
def up(
    name: ClusterNameOpt = None,
    engine: Annotated[
        str,
        typer.Option(
            help="auto (kind where Docker runs privileged containers, else the real node) | kind | node"
        ),
    ] = "auto",
    sandbox: Annotated[str, typer.Option(help="The Sandbox to make Ready ('' for none).")] = "default",
    scenario: Annotated[str, typer.Option(help="The Sandbox's scenario.")] = "tabular-quality-basic",
    seed: Annotated[int, typer.Option(help="The Sandbox's seed.")] = 7,
    chaos_mesh: Annotated[
        bool | None,
        typer.Option(
            "--chaos-mesh/--no-chaos-mesh",
            help="Install Chaos Mesh (default: on kind; on the real node where its binaries were built).",
        ),
    ] = None,
) -> None:
    """Bring up a cluster with the chart and one Ready Sandbox, and leave it running."""
    from mlsandbox.backends.kube import cluster_state as cs
    from mlsandbox.k8s_operator import local_cluster as lc

    if engine not in ("auto", "kind", "node"):
        raise typer.BadParameter(f"--engine: auto, kind or node, not {engine!r}")
    _interrupt_on_sigterm()
    cluster = name or cs.default_name()
    existing = cs.read(cluster)
    if (
        existing is not None
        and existing.phase == "running"
        and (existing.owner is None or existing.owner.alive())
    ):
        console.print(
            f"cluster [bold]{cluster}[/] runs already ({existing.engine}); `mlsandbox cluster down` first"
        )
        _print_usage(existing)
        return
    with console.status("choosing the engine ..."):
        choice = lc.choose_engine(engine)  # type: ignore[arg-type]
    if choice.engine is None:
        print_error(err_console, lc.ClusterError(f"no engine can run here: {choice.reason}"))
        raise typer.Exit(1)
    label = {"kind": "kind", "node": "the built-in real node"}[choice.engine]
    console.print(f"engine: [bold]{label}[/] ({choice.reason.split(': ', 1)[-1]})", highlight=False)
    options = lc.UpOptions(
        name=cluster,
        engine=choice.engine,
        sandbox=sandbox or None,
        scenario=scenario,
        seed=seed,
        chaos_mesh=chaos_mesh,
    )
    began = time.monotonic()
    try:
        local = lc.up(options, _rich_progress(), choice)
    except (MLSandboxError, KeyboardInterrupt) as exc:
        if isinstance(exc, KeyboardInterrupt):
            exc = lc.ClusterError("interrupted: everything started was taken down again")
        print_error(err_console, exc)
        raise typer.Exit(1) from None
    console.print(f"[bold green]cluster {cluster} up[/] in {time.monotonic() - began:.0f} s ({label})")
    _print_usage(local.state)


def _print_usage(state: Any) -> None:
    from mlsandbox.k8s_operator.local_cluster import usage

    console.print("\nuse it:")
    for line in usage(state):
        console.print(f"  {line}", highlight=False, soft_wrap=True)


@cluster_app.command("down")
def down(name: ClusterNameOpt = None) -> None:
    """Take the cluster down: every process, pod, cgroup, iptables chain, link and mount it made."""
    from mlsandbox.k8s_operator import local_cluster as lc

    began = time.monotonic()
    try:
        with console.status("taking the cluster down ..."):
            lines = lc.down(name)
    except MLSandboxError as exc:
        print_error(err_console, exc)
        raise typer.Exit(1) from None
    for line in lines:
        console.print(f"  removed {escape(line)}", highlight=False)
    console.print(f"cluster down in {time.monotonic() - began:.1f} s")


@cluster_app.command("status")
def status(
    name: ClusterNameOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """The engine, each component and its state, the Sandbox, memory."""
    from mlsandbox.k8s_operator import local_cluster as lc

    try:
        report = lc.status(name)
    except MLSandboxError as exc:
        print_error(err_console, exc)
        raise typer.Exit(1) from None
    if as_json:
        console.print_json(json.dumps(report.model_dump(mode="json")))
        return
    owner = (
        "-" if report.owner_pid is None else f"{report.owner_pid}{'' if report.owner_alive else ' (gone)'}"
    )
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(report.created_at))
    console.print(
        f"cluster [bold]{report.name}[/]: {report.engine}, {report.phase} since {started}, owner {owner}",
        highlight=False,
    )
    console.print(f"  why this engine: {report.reason}", highlight=False)
    if report.kubeconfig:
        console.print(f"  kubeconfig: {report.kubeconfig}", highlight=False)
    table = Table()
    for col in ("component", "kind", "state", "detail", "memory"):
        table.add_column(col, overflow="fold")
    for c in report.components:
        color = {"running": "green", "starting": "yellow"}.get(c.state, "red")
        table.add_row(c.name, c.kind, f"[{color}]{c.state}[/]", c.detail, human_bytes(c.memory_bytes))
    if report.memory_bytes:
        table.add_row("[bold]total[/]", "", "", "processes and pods", human_bytes(report.memory_bytes))
    console.print(table)
    if any(c.state != "running" for c in report.components):
        raise typer.Exit(1)
