"""``mlsandbox train``: MaskablePPO from scratch in sim on families' training instances, then evaluated on
held-out seeds in sim (and, with ``--local N``, on the real local backend) beside random and rule.

With ``--generated N`` the training instances are N generated instances of each family (its ``space:``
drawn, each draw gated in sim, of the train split) with a curriculum over them by difficulty estimate, and
the held-out episodes are generated instances of the test split."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from mlsandbox.cli.common import make_console
from mlsandbox.terminal import print_error

console = make_console()
err_console = make_console(stderr=True)


EvalEpisodes = Annotated[
    int, typer.Option("--eval-episodes", min=0, help="Held-out sim episodes per family.")
]
LocalEpisodes = Annotated[
    int,
    typer.Option(
        "--local",
        min=0,
        help="Held-out episodes per family on the real local backend (the first of the sim ones: the same "
        "instances).",
    ),
]
LocalSandbox = Annotated[
    str, typer.Option("--sandbox", help="The local sandbox of --local (started if it is not up).")
]
Baselines = Annotated[
    bool, typer.Option("--baselines/--no-baselines", help="Random and rule beside the policy.")
]


def _fail(msg: Any) -> typer.Exit:
    print_error(err_console, msg)
    return typer.Exit(code=1)


def register(app: typer.Typer) -> None:
    @app.command()
    def train(
        families: Annotated[
            list[str],
            typer.Argument(help="Families to train on (built-in ids or scenario files); one policy."),
        ],
        steps: Annotated[int, typer.Option("--steps", min=1, help="PPO env-steps in sim.")] = 200_000,
        instances: Annotated[
            int, typer.Option("--instances", min=1, help="Training instances (seeds) per family.")
        ] = 16,
        seed: Annotated[int, typer.Option("--seed", help="The policy's and the draws' seed.")] = 0,
        out: Annotated[
            Path | None,
            typer.Option("--out", help="Output directory (default: runs/train-<time>)."),
        ] = None,
        shaping: Annotated[
            bool,
            typer.Option(
                "--shaping/--no-shaping",
                help="Potential-based shaping for families that declare none (it sums to zero per episode).",
            ),
        ] = True,
        curriculum: Annotated[
            bool,
            typer.Option(
                "--curriculum/--no-curriculum",
                help="Easier variants of each family first (looser bar, larger budget, fewer defects), "
                "the family as declared last; evaluation always plays the family as declared.",
            ),
        ] = True,
        stage: Annotated[
            list[str] | None,
            typer.Option(
                "--stage",
                help="Curriculum: a stage, easiest first, in place of the default ones and of those a "
                "family declares (repeat it): 'bar=1.5,budget=2,defects=0,faults=0' (a key left out keeps "
                "the declared value; with --generated, share= of each family's easiest instances too); the "
                "family as declared is the last stage.",
            ),
        ] = None,
        stage_window: Annotated[
            int, typer.Option("--stage-window", min=1, help="Curriculum: episodes in the success window.")
        ] = 50,
        stage_threshold: Annotated[
            float,
            typer.Option(
                "--stage-threshold",
                min=0.01,
                max=1.0,
                help="Curriculum: the window's success rate to advance.",
            ),
        ] = 0.6,
        novelty: Annotated[
            float,
            typer.Option(
                "--novelty",
                min=0.0,
                help="A count-based exploration bonus of this scale on the training reward (scale/sqrt(n), "
                "n the visits of the step's milestones and action type; 0: none). Not in the curve's "
                "returns nor in evaluation.",
            ),
        ] = 0.0,
        sample_failures: Annotated[
            bool,
            typer.Option(
                "--sample-failures/--sample-evenly",
                help="Several families: draw each in proportion to 0.25 + 0.75 x its failure rate over its "
                "last 50 training episodes (the families the policy fails up to 4x as often), updated at "
                "every curve point; not with --generated.",
            ),
        ] = False,
        ent_coef: Annotated[
            float | None,
            typer.Option("--ent-coef", min=0.0, help="PPO's entropy bonus (default: PPO_SETTINGS, 0.01)."),
        ] = None,
        n_envs: Annotated[
            int,
            typer.Option(
                "--n-envs",
                min=1,
                help="Envs stepped at once, each in a worker process (the rollout length is split among them).",
            ),
        ] = 1,
        eval_episodes: EvalEpisodes = 20,
        local: LocalEpisodes = 0,
        sandbox: LocalSandbox = "train-eval",
        baselines: Baselines = True,
        generated: Annotated[
            int,
            typer.Option(
                "--generated",
                min=0,
                help="Train on this many generated instances of each family (its space: drawn, gated in "
                "sim, train split), the curriculum going from the easiest third by difficulty estimate, "
                "loosened, to all as generated; evaluate on generated test-split instances "
                "(--eval-episodes, --local per family).",
            ),
        ] = 0,
        gate_workers: Annotated[
            int, typer.Option("--gate-workers", min=1, help="--generated: worker processes for the gates.")
        ] = 2,
    ) -> None:
        """Train MaskablePPO from scratch (no demonstrations) in sim, save checkpoints and the learning
        curve (PNG and JSON), then evaluate on held-out seeds with random and rule beside it."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from mlsandbox.agents.curriculum import (
            DEFAULT_STAGES,
            INSTANCE_STAGES,
            Curriculum,
            FailureSampling,
            declared_stages,
            parse_stages,
        )
        from mlsandbox.errors import MLSandboxError
        from mlsandbox.scenario import load_scenario

        if stage and not curriculum:
            raise _fail("--stage sets the curriculum's stages: it cannot go with --no-curriculum")
        if sample_failures and generated:
            raise _fail("--sample-failures weighs families by id: it cannot go with --generated")
        try:
            stages = (
                parse_stages(stage, generated=bool(generated)) if stage
                else INSTANCE_STAGES if generated else DEFAULT_STAGES
            )  # fmt: skip
        except ValueError as e:
            raise _fail(f"--stage: {e}") from None

        try:
            scenarios = [load_scenario(f) for f in families]
        except MLSandboxError as e:
            raise _fail(e) from None
        try:
            from mlsandbox.agents import training
        except ImportError as e:  # pragma: no cover - the rl extra
            raise _fail(e) from None
        if beyond := training.unreachable(scenarios):
            raise _fail(
                "the training env's action slots cannot meet the goal of " + "; ".join(beyond)
                + ": train on families whose goal is a registered model"
            )  # fmt: skip
        directory = out or Path("runs") / time.strftime("train-%Y%m%d-%H%M%S")
        train_set: list[Any] = []
        test_set: list[Any] = []
        if generated:
            train_set, test_set = _generate(
                scenarios, generated, max(eval_episodes, local), seed, gate_workers
            )
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "instances.json").write_text(
                json.dumps(
                    {
                        split: [
                            {"family": r.family, "id": r.scenario.id, "seed": r.scenario.seed,
                             "difficulty": r.estimate, "scenario": r.scenario.model_dump(mode="json")}
                            for r in ranked
                        ]
                        for split, ranked in (("train", train_set), ("test", test_set))
                    },
                    indent=2,
                )
            )  # fmt: skip
        progress = Progress(
            TextColumn("[bold]training"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
            console=console,
        )
        with progress:
            task = progress.add_task("train", total=steps, status="")

            def point(p: training.CurvePoint) -> None:
                status = (
                    f"stage {p.stage}  success {p.success_rate:.0%}  return {p.mean_return:+.2f}  "
                    f"length {p.mean_length:.1f}"
                )
                progress.update(task, completed=min(p.steps, steps), status=status)
                if not console.is_terminal:  # a log (no live bar): one line per curve point
                    console.print(f"{p.steps:,} env-steps  {p.wall_s:,.0f} s  {status}")

            try:
                result = training.train_policy(
                    scenarios, steps=steps, out=directory, instances=instances, seed=seed, shaping=shaping,
                    on_point=point,
                    curriculum=(
                        Curriculum(
                            stages=stages, window=stage_window, threshold=stage_threshold,
                            # a family's own stages, unless --stage sets every family's
                            own={} if stage or generated else declared_stages(scenarios),
                        )
                        if curriculum else None
                    ),
                    settings={"ent_coef": ent_coef} if ent_coef is not None else None,
                    n_envs=n_envs,
                    generated=train_set,
                    given=[_given(f) for f in families],
                    novelty=novelty,
                    task_sampling=FailureSampling([s.id for s in scenarios]) if sample_failures else None,
                )  # fmt: skip
            except ImportError as e:
                raise _fail(e) from None
        from mlsandbox.backends.sim import fitstore

        store = fitstore.current()
        kept = "off" if store is None else f"{store.hits:,} fits read, {store.misses:,} done"
        if n_envs > 1:  # the envs, and their fits, are in the worker processes
            kept = f"shared on disk by the {n_envs} worker processes"
        console.print(
            f"trained {result.steps:,} env-steps in {result.wall_s:,.0f} s ({result.steps_per_s:,.0f} env-steps/s, "
            f"PPO updates included); fit store: {kept}; saved {directory / 'policy.zip'}, "
            f"{directory / 'curve.png'}"
        )
        tests = _test_scenarios(scenarios, test_set) if generated else None
        _evaluate_run(
            result.model, scenarios, directory, sim=eval_episodes, local=local, sandbox=sandbox,
            baselines=baselines, seed=seed, tests=tests,
        )  # fmt: skip

    @app.command("evaluate-policy")
    def evaluate_policy(
        run: Annotated[
            Path,
            typer.Argument(help="A directory `mlsandbox train` wrote (policy.zip, training.json)."),
        ],
        eval_episodes: EvalEpisodes = 20,
        local: LocalEpisodes = 0,
        sandbox: LocalSandbox = "train-eval",
        baselines: Baselines = True,
        greedy: Annotated[
            bool,
            typer.Option("--greedy/--no-greedy", help="Also the policy's most likely slot at each step."),
        ] = True,
        seed: Annotated[int, typer.Option("--seed", help="The sampled policy's draws.")] = 0,
        checkpoint: Annotated[
            str | None,
            typer.Option(
                "--checkpoint",
                help="Play one of the run's checkpoints ('step-N' or N, as under checkpoints/) instead of "
                "its final policy, a run stopped early included; its rows are 'ppo@step-N'.",
            ),
        ] = None,
    ) -> None:
        """Evaluate a policy `mlsandbox train` saved, again or on more episodes, on the same held-out
        instances (sim and, with --local N, the real local backend), without training; the tables are
        merged into the run's evaluation files and each episode is appended to its episodes.jsonl."""
        from mlsandbox.errors import MLSandboxError
        from mlsandbox.scenario import Scenario, load_scenario

        if not eval_episodes and not local:
            raise _fail("nothing to play: give --eval-episodes or --local a number above 0")
        try:
            summary = json.loads((run / "training.json").read_text())
        except FileNotFoundError:
            raise _fail(f"{run}: no training.json (is it a directory `mlsandbox train` wrote?)") from None
        except ValueError as e:
            raise _fail(f"{run / 'training.json'}: not JSON ({e})") from None
        try:
            scenarios = [load_scenario(f) for f in summary.get("given") or summary["families"]]
        except MLSandboxError as e:
            raise _fail(f"{run}: its families no longer load: {e}") from None
        except KeyError:
            raise _fail(f"{run / 'training.json'}: no families recorded") from None
        tests: dict[str, list[Scenario]] | None = None
        if summary.get("generated"):
            try:
                sets = json.loads((run / "instances.json").read_text())
                tests = {f.id: [] for f in scenarios}
                for r in sets["test"]:
                    tests[r["family"]].append(Scenario.model_validate(r["scenario"]))
            except (FileNotFoundError, KeyError, ValueError) as e:
                raise _fail(
                    f"{run}: trained on generated instances, but instances.json holds no test-split scenarios "
                    f"({type(e).__name__}: {e}); runs before they were recorded cannot be evaluated again"
                ) from None
        try:
            from mlsandbox.agents import training

            model = training.load_policy(run, scenarios, checkpoint=checkpoint)
        except (ImportError, ValueError) as e:
            raise _fail(e) from None
        name = "ppo" if checkpoint is None else f"ppo@step-{checkpoint.removeprefix('step-')}"
        _evaluate_run(
            model, scenarios, run, sim=eval_episodes, local=local, sandbox=sandbox, baselines=baselines,
            seed=seed, tests=tests, greedy=greedy, name=name,
        )  # fmt: skip


def _given(family: str) -> str:
    """A family as `evaluate-policy` loads it again: a file by its absolute path, a built-in id as it is."""
    path = Path(family)
    return str(path.resolve()) if path.is_file() else family


def _test_scenarios(scenarios: list[Any], test_set: list[Any]) -> dict[str, list[Any]]:
    """The generated test-split instances of each family, in the order they were ranked."""
    return {f.id: [t.scenario for t in test_set if t.family == f.id] for f in scenarios}


def _evaluate_run(
    model: Any,
    scenarios: list[Any],
    directory: Path,
    *,
    sim: int,
    local: int,
    sandbox: str,
    baselines: bool,
    seed: int,
    tests: dict[str, list[Any]] | None,
    greedy: bool = True,
    name: str = "ppo",
) -> None:
    """The policy (and the baselines) on ``sim`` held-out episodes per family in sim, then ``local`` on the
    real local backend; ``tests``: the generated test-split instances per family (else held-out seeds).
    Prints the tables; writes evaluation.json and evaluation-by-family.json (the rows of a policy played
    now on a backend replace its earlier rows there) and appends each episode to episodes.jsonl."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from mlsandbox.agents import training

    def chosen(per_family: int) -> list[Any]:
        assert tests is not None
        return [t for f in scenarios for t in tests.get(f.id, [])[:per_family]]

    rows: list[dict[str, Any]] = []
    per_family: list[dict[str, Any]] = []
    runs = [(b, n) for b, n in (("sim", sim), ("local", local)) if n]
    played = directory / "episodes.jsonl"
    policies = 1 + int(greedy) + 2 * int(baselines)
    for backend, n in runs:
        where = (
            {"sandbox": f"train-eval-sim-{seed}"}
            if backend == "sim"
            else {"sandbox": sandbox, "start_sandbox": True}
        )
        episodes = len(chosen(n)) if tests is not None else n * len(scenarios)
        progress = Progress(
            TextColumn(f"[bold]evaluating ({backend})"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
            console=console,
        )
        with progress, played.open("a") as log:
            bar = progress.add_task("eval", total=episodes * policies, status="")

            def on_episode(
                o: Any, backend: str = backend, log: Any = log, bar: Any = bar, progress: Any = progress
            ) -> None:
                log.write(json.dumps({"backend": backend, **o.as_dict()}) + "\n")
                log.flush()
                mark = "success" if o.success else "failure"
                progress.update(bar, advance=1, status=f"{o.policy} {o.family} seed {o.seed}: {mark}")

            evaluation = training.evaluate(
                model, chosen(n) if tests is not None else scenarios, episodes=n, backend=backend,
                baselines=baselines, greedy=greedy, seed=seed, as_given=tests is not None, kinds_of=scenarios,
                on_episode=on_episode, name=name, **where,
            )  # fmt: skip
        rows += evaluation.table()
        per_family += evaluation.by_family()
    if not rows:
        return
    table = Table(
        title="held-out generated instances (test split)"
        if tests is not None
        else f"held-out seeds (from each family's seed + {training.HELD_OUT_OFFSET:,})"
    )
    for col in ("policy", "backend", "episodes", "success [95% CI]", "mean return"):
        table.add_column(col, justify="left" if col in ("policy", "backend") else "right")
    for r in rows:
        table.add_row(
            r["policy"],
            r["backend"],
            str(r["episodes"]),
            f"{r['success_rate']:.0%} [{r['ci95'][0]:.0%}, {r['ci95'][1]:.0%}]",
            f"{r['mean_return']:+.2f}",
        )
    console.print(table)
    now = {(r["backend"], r["policy"]) for r in rows}  # a policy not played now keeps its earlier rows
    for name, new in (("evaluation.json", rows), ("evaluation-by-family.json", per_family)):
        path = directory / name
        earlier = json.loads(path.read_text()) if path.is_file() else []
        kept = [r for r in earlier if (r["backend"], r["policy"]) not in now]
        path.write_text(json.dumps(kept + new, indent=2))
    if len(scenarios) > 1:
        console.print(_family_table(per_family))


def _family_table(rows: list[dict[str, Any]]) -> Table:
    """Successes per family (rows) and policy on a backend (columns)."""
    columns = list(dict.fromkeys(f"{r['policy']} ({r['backend']})" for r in rows))
    table = Table(title="successes per family")
    table.add_column("family")
    for col in columns:
        table.add_column(col, justify="right")
    cells: dict[str, dict[str, str]] = {}
    for r in rows:
        cells.setdefault(r["family"], {})[f"{r['policy']} ({r['backend']})"] = (
            f"{r['successes']}/{r['episodes']}"
        )
    for family, by in cells.items():
        table.add_row(family, *(by.get(col, "-") for col in columns))
    return table


def _generate(
    scenarios: list[Any], train: int, test: int, seed: int, workers: int
) -> tuple[list[Any], list[Any]]:
    """``train`` gated instances of the train split and ``test`` of the test split of each family, ranked
    by difficulty estimate (:class:`~mlsandbox.agents.curriculum.Ranked`); exits with the reason when a
    family declares no space or gives too few valid instances."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from mlsandbox.agents.curriculum import Ranked
    from mlsandbox.instances.generate import Gates, generate
    from mlsandbox.instances.models import Instance, materialize
    from mlsandbox.instances.splits import in_split

    missing = [s.id for s in scenarios if s.space is None]
    if missing:
        raise _fail(
            f"--generated needs a parameter space (a `space:` section), none in: {', '.join(missing)}"
        )
    out: dict[str, list[Ranked]] = {"train": [], "test": []}
    progress = Progress(
        TextColumn("[bold]gating instances"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
    )
    with progress, Gates(workers) as gates:
        bar = progress.add_task("gate", total=(train + test) * len(scenarios), status="")
        for family in scenarios:
            for split, n in (("train", train), ("test", test)):
                if not n:
                    continue

                def on_result(r: Any, family: Any = family, split: str = split) -> None:
                    ok = isinstance(r, Instance)
                    progress.update(bar, advance=int(ok), status=f"{family.id} {split} · {r.id[-12:]}")

                accept = in_split("train") if split == "train" else in_split("test")
                g = generate(family, n, gates=gates, seed=seed, accept=accept, on_result=on_result)
                if not g.complete:
                    reasons = "; ".join(f"{r.gate}: {r.reason}" for r in g.rejected[:3])
                    raise _fail(
                        f"{family.id}: {len(g.instances)} valid {split} instances of {n} "
                        f"({len(g.rejected)} rejected{': ' + reasons if reasons else ''})"
                    )
                out[split] += [
                    Ranked(family.id, materialize(family, i.params), i.difficulty.estimate)
                    for i in g.instances
                ]
    for split, ranked in out.items():
        if ranked:
            estimates = [r.estimate for r in ranked]
            console.print(
                f"{split}: {len(ranked)} generated instances, difficulty estimate "
                f"{min(estimates):.2f}-{max(estimates):.2f} (mean {sum(estimates) / len(estimates):.2f})"
            )
    return out["train"], out["test"]
