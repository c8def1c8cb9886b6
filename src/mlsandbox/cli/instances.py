"""Generated instances: ``tasks generate``, ``tasks freeze``, ``tasks show`` and ``export harbor``."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from mlsandbox.cli.common import make_console
from mlsandbox.terminal import print_error

console = make_console()
err_console = make_console(stderr=True)

tasks_app = typer.Typer(help="Generated instances of the families, and frozen suites.", no_args_is_help=True)
export_app = typer.Typer(help="Export a suite to another harness's task format.", no_args_is_help=True)

WorkersOpt = Annotated[
    int, typer.Option("--workers", "-j", min=1, max=16, help="Processes that run the gates (sim).")
]


def _fail(msg: Any) -> typer.Exit:
    print_error(err_console, msg)
    return typer.Exit(code=1)


def _progress() -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=err_console,
    )


def _families(names: list[str] | None, every: bool) -> list[Any]:
    from mlsandbox.scenario import catalog_ids, load_builtin, load_scenario

    if every:
        return [sc for sc in map(load_builtin, catalog_ids()) if sc.space is not None]
    if not names:
        raise _fail("name one or more families, or --all")
    return [load_scenario(n) for n in names]


@tasks_app.command("generate")
def tasks_generate(
    family: Annotated[list[str] | None, typer.Argument(help="Family ids or YAML files.")] = None,
    n: Annotated[int, typer.Option("--n", "-n", min=1, help="Valid instances per family.")] = 10,
    every: Annotated[bool, typer.Option("--all", help="Every family that declares a space.")] = False,
    seed: Annotated[
        int, typer.Option("--seed", help="Generation seed (the same seed, the same output).")
    ] = 0,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")] = Path("instances"),
    workers: WorkersOpt = 2,
) -> None:
    """Draw instances from each family's parameter space and keep those that pass the gates in sim: the
    reference agent succeeds, the random and no-op agents fail. Writes FAMILY.instances.jsonl and
    FAMILY.rejected.jsonl per family, each atomically."""
    from mlsandbox.errors import MLSandboxError
    from mlsandbox.instances.generate import Gates, NoSpaceError, generate
    from mlsandbox.instances.models import Instance
    from mlsandbox.instances.store import write_jsonl

    try:
        families = _families(family, every)
        missing = [f.id for f in families if f.space is None]
        if missing:
            raise NoSpaceError(f"no parameter space (a `space:` section) in: {', '.join(missing)}")
    except (MLSandboxError, ValueError) as e:
        raise _fail(e) from None
    t0 = time.perf_counter()
    kept = rejected = 0
    table = Table(title=f"generated instances (seed {seed})")
    for col in ("family", "valid", "rejected", "reasons", "difficulty (mean)", "file"):
        table.add_column(col, overflow="fold")
    with _progress() as progress, Gates(workers) as gates:
        bar = progress.add_task("generate", total=n * len(families), status="")
        short: list[str] = []
        for index, fam in enumerate(families):

            def on_result(r: Any, fam: Any = fam) -> None:
                ok = isinstance(r, Instance)
                progress.update(bar, advance=1 if ok else 0, status=f"{fam.id} · {r.id[-12:]}")
                if not ok:
                    progress.console.print(f"[yellow]rejected[/] {r.id} ({r.gate}): {r.reason}")

            g = generate(fam, n, gates=gates, seed=seed, on_result=on_result)
            path = out / f"{fam.id}.instances.jsonl"
            write_jsonl(path, g.instances)
            write_jsonl(out / f"{fam.id}.rejected.jsonl", g.rejected)
            kept += len(g.instances)
            rejected += len(g.rejected)
            reasons = Counter(r.gate for r in g.rejected)
            mean = sum(i.difficulty.estimate for i in g.instances) / len(g.instances) if g.instances else 0
            table.add_row(
                fam.id,
                f"{len(g.instances)}/{n}" if g.complete else f"[red]{len(g.instances)}/{n}[/]",
                str(len(g.rejected)),
                ", ".join(f"{k} {v}" for k, v in reasons.items()) or "-",
                f"{mean:.2f}",
                str(path),
            )
            if not g.complete:
                short.append(fam.id)
            # The bar counts valid instances: a short family leaves its unmet share behind.
            progress.update(bar, completed=n * (index + 1))
    dt = time.perf_counter() - t0
    console.print(table)
    console.print(
        f"{kept} valid, {rejected} rejected in {dt:.0f} s with {workers} worker(s):"
        f" {kept / dt * 60:.0f} valid instances/min"
    )
    if short:
        raise _fail(
            f"fewer than {n} valid instances of {', '.join(short)}: see the rejected instances and their reasons"
        )


@tasks_app.command("freeze")
def tasks_freeze(
    suite: Annotated[str, typer.Argument(help="A frozen suite id, e.g. mle-core-v1.")],
    split: Annotated[
        str, typer.Option("--split", help="train+dev (the manifest) or test (needs the secret seed).")
    ] = "train+dev",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="File to write.")] = None,
    workers: WorkersOpt = 2,
) -> None:
    """Generate and gate a suite's splits: train and dev into its manifest, or the test split (from the
    secret seed in MLSANDBOX_TEST_SEED) into a separate file that is never shipped with the package."""
    from mlsandbox.errors import MLSandboxError
    from mlsandbox.instances.generate import Gates
    from mlsandbox.instances.splits import (
        TEST_SEED_ENV,
        dump_json,
        freeze,
        freeze_test,
        load_spec,
        manifest_path,
        test_seed_from_env,
    )
    from mlsandbox.instances.store import write_atomic

    if split not in ("train+dev", "test"):
        raise _fail("--split is train+dev or test")
    try:
        spec = load_spec(suite)
        with _progress() as progress, Gates(workers) as gates:
            bar = progress.add_task(f"freeze {suite} {split}", total=None, status="")

            def on_result(r: Any) -> None:
                progress.update(bar, advance=1, status=r.id)

            if split == "test":
                secret = test_seed_from_env()
                if secret is None:
                    raise _fail(f"set {TEST_SEED_ENV} to the secret seed of the test split")
                if out is None:
                    raise _fail("the test split goes to a file of its own: pass --out")
                doc: Any = freeze_test(spec, secret, gates=gates, on_result=on_result)
                target = out
            else:
                doc = freeze(spec, gates=gates, on_result=on_result)
                target = out or manifest_path(suite)
        write_atomic(target, dump_json(doc))
    except MLSandboxError as e:
        raise _fail(e) from None
    console.print(f"wrote {target}")


@tasks_app.command("show")
def tasks_show(
    suite: Annotated[str, typer.Argument(help="A frozen suite id.")],
) -> None:
    """A frozen suite's splits: instances per family, hashes, the difficulty spread."""
    from mlsandbox.errors import MLSandboxError
    from mlsandbox.instances.splits import TEST_SEED_ENV, load_manifest, load_spec

    try:
        spec, manifest = load_spec(suite), load_manifest(suite)
    except MLSandboxError as e:
        raise _fail(e) from None
    table = Table(title=f"{spec.id}: {spec.title}")
    for col in ("split", "instances", "families", "difficulty (min-mean-max)", "sha256"):
        table.add_column(col, overflow="fold")
    for name, part in manifest.splits.items():
        d = [i.difficulty.estimate for i in part.instances] or [0.0]
        table.add_row(
            name,
            str(len(part.instances)),
            str(len({i.family for i in part.instances})),
            f"{min(d):.2f}-{sum(d) / len(d):.2f}-{max(d):.2f}",
            part.sha256[:16],
        )
    table.add_row(
        "test", str(spec.per_family.get("test", 0) * len(spec.families)), "", "", f"${TEST_SEED_ENV}"
    )
    console.print(table)


@export_app.command("harbor")
def export_harbor(
    suite: Annotated[str, typer.Argument(help="A frozen suite id (e.g. mle-core-v1).")],
    directory: Annotated[Path, typer.Argument(help="Where to write the tasks (one folder each).")],
    split: Annotated[list[str] | None, typer.Option("--split", help="Splits to export (repeatable).")] = None,
    test_file: Annotated[
        Path | None, typer.Option("--test-file", help="The test split's file (tasks freeze --split test).")
    ] = None,
    image: Annotated[
        str, typer.Option("--image", help="The project image the task environments build FROM.")
    ] = "",
) -> None:
    """Write one Harbor task per instance: instruction.md, task.toml, environment/Dockerfile,
    tests/test.sh (grades through the sandbox's grader) and solution/solve.sh (the reference agent)."""
    from mlsandbox.errors import MLSandboxError
    from mlsandbox.instances.harbor import DEFAULT_IMAGE, export_suite
    from mlsandbox.instances.splits import load_split

    splits = split or ["dev"]
    try:
        written: list[Path] = []
        for s in splits:
            if s not in ("train", "dev", "test"):
                raise _fail(f"unknown split {s!r}: train, dev or test")
            pairs = load_split(suite, s, test_file=test_file)  # type: ignore[arg-type]
            written += export_suite(pairs, directory, split=s, image=image or DEFAULT_IMAGE)
    except MLSandboxError as e:
        raise _fail(e) from None
    console.print(f"wrote {len(written)} Harbor tasks in {directory}")


def register(app: typer.Typer) -> None:
    app.add_typer(tasks_app, name="tasks")
    app.add_typer(export_app, name="export")
