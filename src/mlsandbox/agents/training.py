"""Train a policy from scratch in ``sim`` and evaluate it: what ``mlsandbox train`` runs.

A policy is sb3-contrib's ``MaskablePPO`` (``"MlpPolicy"``, :data:`~mlsandbox.agents.transfer.PPO_SETTINGS`)
on the transfer env's wrapper stack (:func:`~mlsandbox.agents.transfer.transfer_env`: masked discrete slots
around the flat observation, no hidden state in it). It trains on the **sim** backend only, with no
demonstrations, on the *training instances* of the given families: each episode one of the families at a
seed among ``instances`` seeds from the family's own (``SuiteEpisodes``). A training run over a fixed set of
instances pays for each real fit once: fits are kept in the fit store
(:mod:`mlsandbox.backends.sim.fitstore`) and generated datasets in memory.

Exploration is helped by potential-based shaping (:data:`DEFAULT_SHAPING`, on unless ``shaping=False``, and
only for a family that declares none of its own): a milestone reached (the data inspected, a cleaned
dataset, a job that succeeded, a model registered) adds its weight once, and the potential returns to zero
when the episode ends, so the shaping sums to zero over every finished episode and leaves the best policy
unchanged. Evaluation never uses shaping: it reports success, and the return of the family's own reward.

With a :class:`~mlsandbox.agents.curriculum.Curriculum` (``mlsandbox train``'s default), training episodes
start on easier variants of each family and end on the family as declared (see
:mod:`mlsandbox.agents.curriculum`); the reward and its shaping are the same in every stage. Trained on
*generated* instances instead (``generated``: each a draw of the family's ``space:`` that passed the gates,
played at its own seed), the curriculum's stages are the easiest shares of them by difficulty estimate, and
evaluation plays other generated instances, of the test split (``evaluate(..., as_given=True)``).

:func:`train_policy` saves checkpoints, the final policy, the learning curve (JSON and a PNG: success rate,
return and episode length against env-steps) under an output directory. :func:`evaluate` plays held-out
seeds (never among the training instances: ``seed + HELD_OUT_OFFSET + k``) with the trained policy (its
actions sampled, as it was trained, and greedy), the uniform random policy over valid slots and the rule
agent, on any backend, with 95 % Wilson intervals.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsandbox.agents.curriculum import (
    Curriculum,
    EasiestShare,
    FailureSampling,
    Loosening,
    Ranked,
    instance_stages,
    stage_scenarios,
)
from mlsandbox.agents.transfer import (
    PPO_SETTINGS,
    SETUP,
    Outcome,
    model_policy,
    play,
    play_agent,
    random_policy,
    transfer_env,
)
from mlsandbox.scenario import Scenario

if TYPE_CHECKING:  # the rl extra
    from sb3_contrib import MaskablePPO

DEFAULT_SHAPING: dict[str, float] = {
    "data_inspected": 0.25,
    "data_cleaned": 0.5,
    "job_succeeded": 1.0,
    "model_registered": 1.0,
    "model_served": 1.0,
}
"""Potential-based shaping weights a training run adds to a family that declares none."""
HELD_OUT_OFFSET = 100_000
"""Evaluation seeds start this far from a family's seed (training instances use the first ``instances``)."""
GOAL_ACTIONS: dict[str, tuple[str, ...]] = {"deployment_slo": ("deploy_model",)}
"""Action types a goal cannot be met without, beyond those that register a model."""
PIPELINE_ONLY = frozenset({"train_model", "register_model"})
"""Actions a scenario may forbid by hand outright, leaving its pipelines (``run_flow``) the only way to a model."""


def unreachable(scenarios: Sequence[Scenario], action_types: Sequence[str] | None = None) -> list[str]:
    """The scenarios whose goal the training env's action slots (``action_types``, by default those of
    :data:`~mlsandbox.agents.transfer.SETUP`) cannot meet, each with what its goal needs: a policy trained
    on them could only learn to give up."""
    types = tuple(SETUP["action_types"] if action_types is None else action_types)
    out = []
    for s in scenarios:
        missing = [a for a in GOAL_ACTIONS.get(s.goal.type, ()) if a not in types]
        if missing:
            out.append(f"{s.id} (its {s.goal.type} goal needs {', '.join(missing)})")
        # a dataset served by an API or a database reaches the lake only through an ingestion
        fetched = [
            src.name for src in s.sources if src.type in ("api", "postgres") and src.dataset == s.goal.dataset
        ]
        if fetched and "ingest_source" not in types:
            out.append(f"{s.id} (its data comes from source {fetched[0]}: it needs ingest_source)")
        # a model that only a pipeline may train or register needs the pipeline's action
        by_hand = sorted({f.action for f in s.constraints.forbidden_actions if not f.params} & PIPELINE_ONLY)
        if by_hand and "run_flow" not in types:
            out.append(f"{s.id} (its constraints forbid {' and '.join(by_hand)} by hand: it needs run_flow)")
        if (
            fetched
            and "ingest_source" in types
            and all(src.name != fetched[0] for src in s.sources[: SETUP["max_sources"]])
        ):
            out.append(
                f"{s.id} (its source {fetched[0]} is beyond the env's {SETUP['max_sources']} source slots)"
            )
    return out


def several_kinds(scenarios: Sequence[Scenario]) -> bool:
    """Whether the scenarios span more than one kind of work: a policy over them then reads the episode's
    kind in its observation (``kind_features``)."""
    from mlsandbox.tasks.registry import kind_of

    return len({kind_of(s.dataset(s.goal.dataset)).name for s in scenarios}) > 1


def timed(scenarios: Sequence[Scenario]) -> bool:
    """Whether a scenario has a deadline or a rolling compute window: a policy over them then reads the
    shares left in its observation (``time_features``)."""
    return any(s.budget.deadline_s is not None or s.budget.window is not None for s in scenarios)


def with_shaping(scenario: Scenario, shaping: bool = True) -> Scenario:
    """``scenario`` with :data:`DEFAULT_SHAPING` when ``shaping`` and it declares no shaping of its own."""
    if not shaping or scenario.reward.shaping:
        return scenario
    reward = scenario.reward.model_copy(update={"shaping": dict(DEFAULT_SHAPING)})
    return scenario.model_copy(update={"reward": reward})


@dataclass
class CurvePoint:
    """The training episodes that finished in one window of env-steps."""

    steps: int
    wall_s: float
    episodes: int
    success_rate: float
    mean_return: float
    """The training return (shaping included; a novelty bonus is not)."""
    mean_length: float
    stage: int = 0
    """The curriculum stage at the end of the window (0 without a curriculum)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TrainResult:
    model: MaskablePPO
    steps: int
    wall_s: float
    curve: list[CurvePoint]
    out: Path
    families: list[str]
    instances: int
    shaping: bool
    curriculum: Curriculum | None = None
    settings: dict[str, Any] | None = None
    n_envs: int = 1
    """Envs stepped at once (worker processes when above 1)."""
    generated: Sequence[Ranked] = ()
    """The generated instances trained on (none: ``instances`` seeds of each family)."""
    given: Sequence[str] = ()
    """The families as given (built-in ids, scenario files' paths): what loads them again."""
    novelty: float = 0.0
    """The count-based exploration bonus's scale (0: none; see :class:`~mlsandbox.env.wrappers.NoveltyBonus`)."""
    finished: bool = True
    """False while the run goes on (the ``training.json`` written at each curve point and checkpoint)."""
    task_sampling: FailureSampling | None = None
    """Families drawn more often the more they are failed (None: every training scenario as likely)."""

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s if self.wall_s else float("nan")

    def summary(self) -> dict[str, Any]:
        from mlsandbox import __version__
        from mlsandbox.evaluation.provenance import source_commit

        return {
            "mlsandbox": __version__,
            "commit": source_commit(),
            **dict(zip(("action_slots", "observation_size"), layout(self.model), strict=True)),
            "families": self.families,
            **({"given": list(self.given)} if self.given else {}),
            "instances": self.instances,
            "shaping": self.shaping,
            "novelty": self.novelty,
            "ppo_settings": ppo_settings(self.settings, self.n_envs),
            "n_envs": self.n_envs,
            "curriculum": self.curriculum.summary() if self.curriculum is not None else None,
            "generated": [
                {"family": r.family, "id": r.scenario.id, "seed": r.scenario.seed, "difficulty": r.estimate}
                for r in self.generated
            ]
            or None,
            "steps": self.steps,
            "wall_s": round(self.wall_s, 1),
            "steps_per_s": round(self.steps_per_s, 1),
            "curve": [p.as_dict() for p in self.curve],
            "task_sampling": self.task_sampling.summary() if self.task_sampling is not None else None,
            "finished": self.finished,
        }

    def write(self) -> None:
        """``training.json`` and ``curve.png`` under ``out``, as the run stands."""
        (self.out / "training.json").write_text(json.dumps(self.summary(), indent=2))
        plot_curve(
            self.curve,
            self.out / "curve.png",
            title=f"MaskablePPO from scratch in sim: {', '.join(self.families)}",
            stage_starts=self.curriculum.started[1:] if self.curriculum is not None else (),
        )


def train_policy(
    scenarios: Sequence[Scenario],
    *,
    steps: int,
    out: Path,
    instances: int = 16,
    seed: int = 0,
    shaping: bool = True,
    window: int = 4096,
    checkpoint_every: int = 50_000,
    settings: dict[str, Any] | None = None,
    on_point: Callable[[CurvePoint], None] | None = None,
    curriculum: Curriculum | None = None,
    n_envs: int = 1,
    generated: Sequence[Ranked] = (),
    given: Sequence[str] = (),
    novelty: float = 0.0,
    task_sampling: FailureSampling | None = None,
) -> TrainResult:
    """Train MaskablePPO from scratch in sim on ``instances`` seeds of each scenario (see the module
    docstring); a curve point every ``window`` env-steps, a checkpoint every ``checkpoint_every``.

    ``n_envs`` above 1 steps that many envs in worker processes (Stable-Baselines3's ``SubprocVecEnv``,
    each env its own sim sandbox and seed draws, the fit store shared on disk) and batches the policy's
    forward passes over them; each env's rollout is ``n_steps / n_envs`` long, so a PPO update sees as many
    env-steps as with one env.

    With ``curriculum`` the training episodes go through its stages (see
    :mod:`mlsandbox.agents.curriculum`): each stage's scenarios are the given ones loosened, the last
    stage the scenarios as given; the stage changes in every env of the vector env at once
    (``env_method("set_stage", k)``), and ``training.json`` records the step each stage began at.

    ``given``: how the families were named (ids, scenario files' absolute paths), which ``training.json``
    records so that the policy can be evaluated again (``mlsandbox evaluate-policy``).

    ``novelty`` above 0 adds a count-based exploration bonus to the training reward
    (:class:`~mlsandbox.env.wrappers.NoveltyBonus`, one count per env); the curve's returns leave it out.

    ``task_sampling`` draws the families the policy fails more often (:class:`FailureSampling`: the
    weights set in every env at each curve point, from each family's last training episodes); not with
    ``generated`` instances, whose ids are the instances', not the family's."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if instances < 1:
        raise ValueError(f"instances must be at least 1, got {instances}")
    if not scenarios:
        raise ValueError("no scenario to train on")
    if beyond := unreachable(scenarios):
        raise ValueError(
            "the training env's action slots cannot meet the goal of " + "; ".join(beyond)
            + ": its slots have no action of that type (mlsandbox.agents.transfer.SETUP)"
        )  # fmt: skip
    if n_envs < 1:
        raise ValueError(f"n_envs must be at least 1, got {n_envs}")
    if novelty < 0:
        raise ValueError(f"novelty is a bonus's scale of at least 0, got {novelty}")
    if task_sampling is not None and generated:
        raise ValueError("task sampling weighs families by id: it cannot go with generated instances")
    try:
        import torch
        from sb3_contrib import MaskablePPO
        from stable_baselines3.common.callbacks import BaseCallback
    except ImportError as e:  # pragma: no cover - depends on the installed extras
        raise ImportError(f"training needs the rl extra (pip install 'mlsandbox[rl]'): {e}") from e
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "checkpoints").mkdir(exist_ok=True)
    stages: list[list[Scenario]] | None = None
    if generated:
        unknown = {r.family for r in generated} - {s.id for s in scenarios}
        if unknown:
            raise ValueError(f"generated instances of families not trained on: {', '.join(sorted(unknown))}")
        ranked = [Ranked(r.family, with_shaping(r.scenario, shaping), r.estimate) for r in generated]
        shaped = [r.scenario for r in ranked]
        if curriculum is not None:
            if not all(isinstance(st, EasiestShare) for st in curriculum.stages):
                raise ValueError("a curriculum over generated instances has EasiestShare stages")
            stages = instance_stages(ranked, [st for st in curriculum.stages if isinstance(st, EasiestShare)])
    else:
        shaped = [with_shaping(s, shaping) for s in scenarios]
        if curriculum is not None:
            if not all(isinstance(st, Loosening) for st in curriculum.stages):
                raise ValueError("a curriculum over a declared family has Loosening stages")
            stages = stage_scenarios(
                shaped, [st for st in curriculum.stages if isinstance(st, Loosening)], own=curriculum.own
            )
    if curriculum is not None:
        curriculum.total_steps = curriculum.total_steps or steps
    make = functools.partial(
        _training_env,
        shaped,
        instances=1 if generated else instances,
        kind_features=several_kinds(scenarios),
        time_features=timed(scenarios),
        stages=stages,
        novelty=novelty,
    )
    ppo = ppo_settings(settings, n_envs)
    if n_envs == 1:
        env: Any = make(f"train-{seed}")
    else:
        from stable_baselines3.common.vec_env import SubprocVecEnv

        env = SubprocVecEnv([functools.partial(make, f"train-{seed}-{i}") for i in range(n_envs)])
    curve: list[CurvePoint] = []
    window_eps: list[tuple[bool, float, int]] = []
    returns = np.zeros(n_envs)
    lengths = np.zeros(n_envs, dtype=int)
    t0 = time.monotonic()

    def result(model: Any, *, finished: bool) -> TrainResult:  # the callback sees a BaseAlgorithm
        return TrainResult(
            model=model,
            steps=int(model.num_timesteps),
            wall_s=time.monotonic() - t0,
            curve=list(curve),
            out=out,
            families=[s.id for s in scenarios],
            instances=instances,
            shaping=shaping,
            curriculum=curriculum,
            settings=settings,
            n_envs=n_envs,
            generated=list(generated),
            given=list(given),
            novelty=novelty,
            finished=finished,
            task_sampling=task_sampling,
        )

    def close_window(done_steps: int) -> None:
        if not window_eps:
            return
        p = CurvePoint(
            steps=done_steps,
            wall_s=round(time.monotonic() - t0, 2),
            episodes=len(window_eps),
            success_rate=round(sum(s for s, _, _ in window_eps) / len(window_eps), 4),
            mean_return=round(float(np.mean([r for _, r, _ in window_eps])), 4),
            mean_length=round(float(np.mean([n for _, _, n in window_eps])), 2),
            stage=curriculum.stage if curriculum is not None else 0,
        )
        window_eps.clear()
        curve.append(p)
        if on_point is not None:
            on_point(p)

    class _Curve(BaseCallback):
        def _on_step(self) -> bool:
            returns[:] += np.asarray(self.locals["rewards"], dtype=float) - [
                float(info.get("novelty_bonus", 0.0)) for info in self.locals["infos"]
            ]
            lengths[:] += 1
            for i, (info, done) in enumerate(zip(self.locals["infos"], self.locals["dones"], strict=True)):
                if done:
                    success = bool((info.get("grade") or {}).get("success"))
                    if task_sampling is not None:
                        task_sampling.record(info.get("scenario"), success)
                    window_eps.append((success, float(returns[i]), int(lengths[i])))
                    returns[i], lengths[i] = 0.0, 0
                    if curriculum is not None and curriculum.record(success, self.num_timesteps):
                        self.training_env.env_method("set_stage", curriculum.stage)
            # with several envs the step count moves by n_envs: a boundary is crossed, not always hit
            before = self.num_timesteps - n_envs
            closed = self.num_timesteps // window > before // window
            if closed:
                close_window(self.num_timesteps)
                if task_sampling is not None:
                    self.training_env.env_method("set_weights", task_sampling.weights(self.num_timesteps))
            saved = (
                bool(checkpoint_every) and self.num_timesteps // checkpoint_every > before // checkpoint_every
            )
            if saved:
                self.model.save(out / "checkpoints" / f"step-{self.num_timesteps}.zip")
            if closed or saved:  # a run stopped early can be looked at, and its checkpoints played
                result(self.model, finished=False).write()
            return True

    try:
        model = MaskablePPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **ppo)
        model.learn(total_timesteps=steps, callback=_Curve())
        close_window(int(model.num_timesteps))
        done = result(model, finished=True)
    finally:
        env.close()
    model.save(out / "policy.zip")
    done.write()
    return done


def ppo_settings(settings: dict[str, Any] | None, n_envs: int = 1) -> dict[str, Any]:
    """:data:`PPO_SETTINGS` with ``settings`` over them; with several envs each env's ``n_steps`` is its
    share of the rollout (an update sees as many env-steps as with one env)."""
    out = {**PPO_SETTINGS, **(settings or {})}
    if n_envs > 1:
        out["n_steps"] = max(1, int(out["n_steps"]) // n_envs)
    return out


def _training_env(
    scenarios: Sequence[Scenario],
    sandbox: str,
    *,
    instances: int,
    kind_features: bool,
    stages: Sequence[Sequence[Scenario]] | None,
    time_features: bool = False,
    novelty: float = 0.0,
) -> Any:
    """One training env (in this process, or in a worker process of a vector env: BLAS single-threaded)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    return transfer_env(
        scenarios,
        backend="sim",
        sandbox=sandbox,
        seeds_per_scenario=instances,
        kind_features=kind_features,
        time_features=time_features,
        stages=stages,
        novelty=novelty,
    )


def stage_labels(stage_starts: Sequence[int], span: float, *, apart: float = 0.04) -> list[tuple[int, str]]:
    """One label per group of curriculum stages that began within ``apart`` of the x-axis (``span``
    env-steps) of the group's first: ``stage 2``, or ``stages 1-2`` where two lines would overlap."""
    groups: list[list[tuple[int, int]]] = []
    for k, at in enumerate(stage_starts, start=1):
        if groups and at - groups[-1][0][1] < apart * max(span, 1):
            groups[-1].append((k, at))
        else:
            groups.append([(k, at)])
    return [(g[0][1], f"stage {g[0][0]}" if len(g) == 1 else f"stages {g[0][0]}-{g[-1][0]}") for g in groups]


def plot_curve(
    curve: Sequence[CurvePoint], path: Path, *, title: str, stage_starts: Sequence[int] = ()
) -> None:
    """Success rate, return and episode length of the training episodes against env-steps, as a PNG (a
    dashed line where each curriculum stage after the first began)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    steps_label = FuncFormatter(lambda v, _pos: f"{v / 1000:g}k" if v else "0")
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    x = [p.steps for p in curve]
    for ax, values, label in zip(
        axes,
        ([p.success_rate for p in curve], [p.mean_return for p in curve], [p.mean_length for p in curve]),
        (
            "success rate (training episodes)",
            "mean return (shaping included, novelty bonus not)",
            "mean episode length",
        ),
        strict=True,
    ):
        ax.plot(x, values, marker=".")
        for at in stage_starts:
            ax.axvline(at, color="grey", linestyle="--", linewidth=0.8)
        for at, text in stage_labels(stage_starts, max([*x, *stage_starts], default=0)):
            ax.annotate(text, (at, 1), xycoords=("data", "axes fraction"), fontsize=7,
                        rotation=90, va="top", ha="right", color="grey")  # fmt: skip
        ax.set_xlabel("env-steps")
        ax.xaxis.set_major_formatter(steps_label)  # 160k, not 160000 (whose labels run together)
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].set_ylim(-0.02, 1.02)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def held_out(scenarios: Sequence[Scenario], episodes: int) -> list[Scenario]:
    """``episodes`` held-out instances per scenario: its own, at seeds never used in training."""
    return [
        s.model_copy(update={"seed": int(s.seed) + HELD_OUT_OFFSET + k})
        for s in scenarios
        for k in range(episodes)
    ]


def layout(holder: Any) -> tuple[int, int]:
    """An env's or a policy's action slots and observation features (a discrete action space around a
    flat observation, as the training env has)."""
    slots = int(getattr(holder.action_space, "n", 0))
    return slots, int(np.prod(holder.observation_space.shape or (0,)))


def checkpoints(run: Path) -> list[str]:
    """The checkpoints a training run saved (``step-N``, by env-steps)."""
    found = [p.stem for p in (run / "checkpoints").glob("step-*.zip") if p.stem[5:].isdigit()]
    return sorted(found, key=lambda name: int(name[5:]))


def load_policy(run: Path, scenarios: Sequence[Scenario], *, checkpoint: str | None = None) -> MaskablePPO:
    """The policy a training run saved (``run/policy.zip``; with ``checkpoint``, its checkpoint of that
    name, ``step-N`` or ``N``), checked against the training env this checkout builds for ``scenarios``: a
    policy trained when the env had other slots or features cannot be played (``ValueError`` naming both
    layouts and the commit the run recorded)."""
    try:
        from sb3_contrib import MaskablePPO
    except ImportError as e:  # pragma: no cover - depends on the installed extras
        raise ImportError(f"evaluating a policy needs the rl extra (pip install 'mlsandbox[rl]'): {e}") from e
    if checkpoint is not None:
        name = checkpoint if checkpoint.startswith("step-") else f"step-{checkpoint}"
        path = run / "checkpoints" / f"{name}.zip"
        if not path.is_file():
            raise ValueError(
                f"{run}: no checkpoint {checkpoint!r} (saved: {', '.join(checkpoints(run)) or 'none'})"
            )
    else:
        path = run / "policy.zip"
    if not path.is_file():
        raise ValueError(
            f"{run}: no policy.zip (is it a directory `mlsandbox train` wrote? a run stopped before its end "
            f"has only its checkpoints: {', '.join(checkpoints(run)) or 'none'})"
        )
    model = MaskablePPO.load(path, device="cpu")
    env = transfer_env(
        list(scenarios), backend="sim", sandbox="policy-layout", kind_features=several_kinds(scenarios),
        time_features=timed(scenarios),
    )  # fmt: skip
    try:
        here = layout(env)
    finally:
        env.close()
    saved = layout(model)
    if saved != here:
        recorded = {}
        if (run / "training.json").is_file():
            recorded = json.loads((run / "training.json").read_text())
        commit = recorded.get("commit") or "not recorded"
        raise ValueError(
            f"{path} was trained with {saved[0]} action slots and {saved[1]} observation features; this "
            f"checkout's training env has {here[0]} and {here[1]} for these families: play it with the "
            f"checkout it was trained on (commit {commit})"
        )
    return model


def sampled_policy(model: MaskablePPO) -> Callable[[np.ndarray, np.ndarray], int]:
    """A trained model's action drawn from its distribution over the valid slots."""
    return lambda obs, mask: int(model.predict(obs, action_masks=mask, deterministic=False)[0])


@dataclass
class Evaluation:
    backend: str
    outcomes: dict[str, list[Outcome]]
    """Policy or agent name -> one outcome per held-out episode."""

    def table(self) -> list[dict[str, Any]]:
        """One row per policy: its success rate with a 95 % Wilson interval and its mean return."""
        return [_row(self.backend, name, res) for name, res in self.outcomes.items()]

    def by_family(self) -> list[dict[str, Any]]:
        """One row per policy and family (a family's generated instances count as the family)."""
        rows = []
        for name, res in self.outcomes.items():
            families: dict[str, list[Outcome]] = {}
            for o in res:
                families.setdefault(o.family, []).append(o)
            rows += [{"family": f, **_row(self.backend, name, os)} for f, os in families.items()]
        return rows


def _row(backend: str, name: str, res: Sequence[Outcome]) -> dict[str, Any]:
    from mlsandbox.evaluation.stats import wilson

    k = sum(o.success for o in res)
    ci = wilson(k, len(res))
    return {
        "policy": name,
        "backend": backend,
        "episodes": len(res),
        "successes": k,
        "success_rate": round(k / len(res), 4) if res else float("nan"),
        "ci95": [round(ci.low, 4), round(ci.high, 4)],
        "mean_return": round(float(np.mean([o.total_reward for o in res])), 4) if res else None,
    }


def evaluate(
    model: MaskablePPO,
    scenarios: Sequence[Scenario],
    *,
    episodes: int,
    backend: str = "sim",
    baselines: bool = True,
    greedy: bool = True,
    seed: int = 0,
    on_episode: Callable[[Outcome], None] | None = None,
    as_given: bool = False,
    kinds_of: Sequence[Scenario] | None = None,
    name: str = "ppo",
    **env_kwargs: Any,
) -> Evaluation:
    """The trained policy (and, with ``baselines``, the random policy and the rule agent) on ``episodes``
    held-out seeds of each scenario, on ``backend``, without shaping. With ``as_given`` each scenario is
    played once, at its own seed (held-out generated instances; ``episodes`` is then unused).
    ``kinds_of``: the scenarios the policy was trained on, whose kinds of work and time features its
    observation carries (default: ``scenarios``).

    ``ppo`` (``name``) is the policy as it was trained: each action drawn from its distribution over the
    valid slots (torch seeded with ``seed``). ``ppo-greedy`` (``name-greedy``, with ``greedy``) takes the most likely slot instead; early in
    training that can be a slot that changes nothing (``wait``) chosen again at every step, since the
    probability spread over several equally good slots can each be below it."""
    import torch

    from mlsandbox.agents import make_agent
    from mlsandbox.env.gym_env import MLSandboxEnv

    tests = list(scenarios) if as_given else held_out(scenarios, episodes)
    trained = kinds_of if kinds_of is not None else scenarios
    env = transfer_env(
        tests,
        backend=backend,
        kind_features=several_kinds(trained),
        time_features=timed(trained),
        **env_kwargs,
    )
    outcomes: dict[str, list[Outcome]] = {}
    try:
        torch.manual_seed(seed)  # the sampled policy's draws
        outcomes[name] = play(env, sampled_policy(model), tests, name=name, on_episode=on_episode)
        if greedy:
            outcomes[f"{name}-greedy"] = play(
                env, model_policy(model), tests, name=f"{name}-greedy", on_episode=on_episode
            )
        if baselines:
            outcomes["random"] = play(env, random_policy(0), tests, name="random", on_episode=on_episode)
            # the rule agent writes its own actions: the plain env, on the sandbox the first one runs on
            plain_kwargs = {**env_kwargs, "start_sandbox": False} if backend != "sim" else env_kwargs
            plain = MLSandboxEnv(tests[0], backend=backend, **plain_kwargs)
            try:
                outcomes["rule"] = play_agent(
                    plain, lambda s: make_agent("rule", seed=s), tests, name="rule", on_episode=on_episode
                )
            finally:
                plain.close()
    finally:
        env.close()
    return Evaluation(backend=backend, outcomes=outcomes)


__all__ = [
    "DEFAULT_SHAPING",
    "GOAL_ACTIONS",
    "HELD_OUT_OFFSET",
    "CurvePoint",
    "Evaluation",
    "TrainResult",
    "checkpoints",
    "evaluate",
    "held_out",
    "layout",
    "load_policy",
    "plot_curve",
    "sampled_policy",
    "several_kinds",
    "stage_labels",
    "train_policy",
    "unreachable",
    "with_shaping",
]
