"""Sim-to-real transfer: a policy trained on the ``sim`` backend, played on any backend.

The transfer families (:data:`FAMILIES`) are built so that success needs a chain of right decisions:
inspect the table, clean it with the strategies its defects call for (impute the gaps, clip the
outliers; ``drop_na`` leaves too few rows when the gaps are many), train the algorithm that reaches the
bar (a linear model: tree ensembles and unclipped rows fall short of it) on a machine with enough memory
(the smallest one kills the trainer), stay within a hard budget, register the right run and submit; in
the incident family the tracker dies while the first job runs, so the job must be diagnosed, the tracker
restarted and the job run again.

:func:`transfer_env` is the RL wrapper stack a policy sees, the same on every backend:
:class:`~mlsandbox.env.wrappers.DiscreteActions` with the slots of :data:`SETUP` (a small discrete action
space with masks) around :class:`~mlsandbox.env.wrappers.FlatObservation` (the episode state and what the
agent has learnt from its observations) around :class:`~mlsandbox.env.wrappers.SuiteEpisodes` (each
episode a scenario of the given split). :data:`PPO_SETTINGS` are the MaskablePPO hyperparameters the
example and the benchmark train with. :func:`play` runs a policy over scenarios (one episode each, at the
scenario's own seed) and :func:`play_agent` does the same for an :class:`~mlsandbox.agents.base.Agent`
(the rule and reference baselines), both returning one :class:`Outcome` per episode. :func:`train` trains
MaskablePPO on the sim backend for a fixed number of environment steps and records a learning curve
(:class:`CurvePoint`: the success rate of the deterministic policy on held-out scenarios, played in sim,
every ``eval_every`` steps).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsandbox.agents.base import Agent
from mlsandbox.agents.runner import run_episode
from mlsandbox.env.gym_env import MLSandboxEnv
from mlsandbox.env.wrappers import (
    DiscreteActions,
    FlatObservation,
    NoveltyBonus,
    StagedEpisodes,
    SuiteEpisodes,
    in_process_env,
)
from mlsandbox.scenario import Scenario
from mlsandbox.scenario.suites import suite

if TYPE_CHECKING:  # the rl extra: imported when a policy is trained
    from sb3_contrib import MaskablePPO

FAMILIES: tuple[str, ...] = ("churn-decisions", "churn-decisions-incident")
"""The transfer families: the base one (difficulty 2) and the one with a tracker outage (difficulty 3)."""

SETUP: dict[str, Any] = {
    "action_types": (
        "check_data_quality",
        "clean_dataset",
        "train_model",
        "get_job",
        "wait",
        "register_model",
        "ingest_source",
        "deploy_model",
        "get_service_health",
        "restart_service",
        "retry_job",
        "submit",
    ),
    "max_datasets": 4,
    "max_jobs": 3,
    "max_sources": 2,
    "replicas": (1, 2),
    "algorithms": ("logistic_regression", "random_forest", "gradient_boosting", "mlp"),
    "machines": ("cpu-micro", "cpu-small"),
    "services": ("minio", "mlflow"),
    "wait_seconds": (60.0,),
    "allow_restart": True,
}
"""The wrapper options of the training env (75 slots): every decision of the transfer families is a slot (and a
fourth algorithm: the kind's fourth ``train_model`` position, the binary kind's neural network), and
so are an ingestion of each of a scenario's first two sources and a deployment of the goal's model (one or
two replicas), which a family whose data comes from an API or a database, or whose goal is a deployment,
cannot do without."""

FAMILIES_SETUP: dict[str, Any] = {
    **SETUP,
    "action_types": tuple(t for t in SETUP["action_types"] if t not in ("ingest_source", "deploy_model")),
    "max_sources": 0,
    "algorithms": ("logistic_regression", "random_forest", "gradient_boosting"),
}
"""The transfer families' own slots (63): every decision of ``churn-decisions`` and its incident variant,
nothing they never need (what :func:`train`, the transfer example and its benchmark play)."""

PPO_SETTINGS: dict[str, Any] = {
    "n_steps": 1024,
    "batch_size": 256,
    "n_epochs": 10,
    "learning_rate": 3e-4,
    "ent_coef": 0.01,
    "gamma": 0.99,
    "gae_lambda": 0.95,
}
"""sb3-contrib ``MaskablePPO`` hyperparameters for :func:`transfer_env` (with ``"MlpPolicy"``)."""

Policy = Callable[[np.ndarray, np.ndarray], int]
"""A policy of the transfer env: (observation, action mask) -> slot."""


def split(name: str, per_family: int, families: Sequence[str] = FAMILIES) -> list[Scenario]:
    """The ``train`` or ``test`` variants of the families (``per_family`` each), as suites draw them."""
    return [e.scenario for e in suite(name, families=list(families), variants_per_family=per_family)]


def transfer_env(
    scenarios: Sequence[Scenario],
    *,
    backend: str = "sim",
    seeds_per_scenario: int = 1,
    kind_features: bool = False,
    time_features: bool = False,
    stages: Sequence[Sequence[Scenario]] | None = None,
    setup: dict[str, Any] | None = None,
    novelty: float = 0.0,
    **env_kwargs: Any,
) -> DiscreteActions:
    """The wrapper stack of :data:`SETUP` on ``backend``, each reset a scenario of ``scenarios`` (see
    :class:`~mlsandbox.env.wrappers.SuiteEpisodes`); ``env_kwargs`` go to
    :class:`~mlsandbox.env.gym_env.MLSandboxEnv` (``sandbox``, ``start_sandbox``, ``backend_config``);
    ``kind_features``: the episode's kind of work in the observation (a policy over several kinds);
    ``time_features``: the deadline and the compute window in the observation;
    ``stages``: a curriculum's scenarios per stage, easiest first (a
    :class:`~mlsandbox.env.wrappers.StagedEpisodes` starting at the first; ``scenarios`` is then unused);
    ``setup``: the wrapper options (default :data:`SETUP`; :data:`FAMILIES_SETUP` for the transfer families);
    ``novelty``: above 0, a count-based exploration bonus of that scale on the reward
    (:class:`~mlsandbox.env.wrappers.NoveltyBonus`, for training)."""
    options = SETUP if setup is None else setup
    base = MLSandboxEnv(scenarios[0], backend=backend, **env_kwargs)
    inner: SuiteEpisodes = (
        StagedEpisodes(base, stages, seeds_per_scenario=seeds_per_scenario)
        if stages
        else SuiteEpisodes(base, scenarios, seeds_per_scenario=seeds_per_scenario)
    )
    flat = FlatObservation(
        NoveltyBonus(inner, novelty) if novelty > 0 else inner,
        max_datasets=options["max_datasets"],
        max_jobs=options["max_jobs"],
        max_sources=options["max_sources"],
        kind_features=kind_features,
        time_features=time_features,
    )
    return DiscreteActions(flat, **options)


_STRATEGY_OF_FLAG = {"impute": "impute_median", "clip_outliers": "clip_outliers"}


def expert_policy(env: DiscreteActions) -> Policy:
    """The families' checklist written over the slots of ``env`` (a :func:`transfer_env`): inspect the
    scenario's table, clean it with what its profile showed (impute the gaps, then clip the outliers),
    train a logistic regression on ``cpu-small``, wait for the job, and when it fails probe the tracker,
    restart it if it is down and retry the job; register the run and submit. It reads only what the
    policy's observation is made of (the episode state and :class:`~mlsandbox.env.wrappers.Memory`), so
    its choices can be imitated from observations; used to warm-start :func:`train` in sim."""
    flat = env.env
    assert isinstance(flat, FlatObservation)

    def act(_obs: np.ndarray, _mask: np.ndarray) -> int:
        slots = env.slots()
        st = in_process_env(env).episode
        mem = flat.memory

        def find(**want: Any) -> int | None:
            for i, (action, ok) in enumerate(slots):
                if ok and all(action.get(k) == v for k, v in want.items()):
                    return i
            return None

        def first(*choices: int | None) -> int:
            for c in choices:
                if c is not None:
                    return c
            return find(type="submit") or 0

        raw = next((k for k, d in st.datasets.items() if d.origin == "scenario"), None)
        if raw is None:
            return first()
        if raw not in mem.profiles:
            return first(find(type="check_data_quality", dataset=raw))
        missing, outliers, _ = mem.profiles[raw]
        wanted = [f for f, need in (("impute", missing), ("clip_outliers", outliers)) if need]
        data, flags = raw, frozenset[str]()
        for flag in wanted:
            made = next((k for k, f in mem.lineage.items() if f == flags | {flag}), None)
            if made is None or made not in st.datasets:
                return first(find(type="clean_dataset", dataset=data, strategy=_STRATEGY_OF_FLAG[flag]))
            data, flags = made, flags | {flag}
        jobs = [j for j in st.jobs.values() if j.dataset == data and j.algorithm == "logistic_regression"]
        for job in jobs:
            if job.state == "succeeded" and job.run_id is not None:
                if job.run_id in mem.registered_runs:
                    return first(find(type="submit"))
                return first(find(type="register_model", run_id=job.run_id))
        if any(j.state in ("queued", "running") for j in jobs):
            return first(find(type="wait"))
        if jobs:  # the last one failed: is the tracker up?
            last = jobs[-1]
            health = mem.health.get("mlflow")
            if health is None or (
                health and "mlflow" not in mem.restarted and last.job_id not in mem.exit_codes
            ):
                if last.job_id not in mem.exit_codes:
                    return first(find(type="get_job", job_id=last.job_id))
                return first(find(type="get_service_health", service="mlflow"))
            if health is False:
                return first(find(type="restart_service", service="mlflow"))
            return first(find(type="retry_job", job_id=last.job_id))
        return first(
            find(type="train_model", dataset=data, algorithm="logistic_regression", machine="cpu-small")
        )

    return act


def random_policy(seed: int) -> Policy:
    """The uniform random policy over the valid slots (it never pays the invalid-action penalty)."""
    rng = np.random.default_rng(seed)
    return lambda _obs, mask: int(rng.choice(np.flatnonzero(mask)))


def model_policy(model: MaskablePPO) -> Policy:
    """A trained sb3-contrib model's deterministic choice among the valid slots."""
    return lambda obs, mask: int(model.predict(obs, action_masks=mask, deterministic=True)[0])


@dataclass
class Outcome:
    """One episode of a policy or an agent."""

    policy: str
    scenario: str
    family: str
    seed: int
    success: bool
    holdout_auc: float | None
    reason: str
    steps: int
    total_reward: float
    credits_used: float
    wall_s: float
    actions: list[str] = field(default_factory=list)
    masked_choices: int = 0
    """Steps whose chosen slot was masked (sent as the masked action, never to the sandbox)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def family_of(scenario: Scenario) -> str:
    """The family a suite variant belongs to (the longest family id its id starts with), or a generated
    instance (its id is the family's and 12 hex digits of its parameters' hash)."""
    found = [f for f in FAMILIES if scenario.id == f or scenario.id.startswith(f + "-")]
    if found:
        return max(found, key=len)
    generated = re.fullmatch(r"(.+)-[0-9a-f]{12}", scenario.id)
    return generated.group(1) if generated else scenario.id


def _outcome(name: str, scenario: Scenario, seed: int, info: dict[str, Any], **kw: Any) -> Outcome:
    grade = info.get("grade") or {}
    return Outcome(
        policy=name,
        scenario=scenario.id,
        family=family_of(scenario),
        seed=seed,
        success=bool(grade.get("success")),
        holdout_auc=grade.get("holdout_auc"),
        reason=str(grade.get("reason", "")),
        credits_used=float((info.get("metrics") or {}).get("credits_used", 0.0)),
        **kw,
    )


def play(
    env: DiscreteActions,
    policy: Policy,
    scenarios: Sequence[Scenario],
    *,
    name: str,
    on_episode: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """One episode of ``policy`` per scenario, at the scenario's own seed."""
    out: list[Outcome] = []
    for scenario in scenarios:
        t0 = time.monotonic()
        obs, info = env.reset(seed=scenario.seed, options={"scenario": scenario})
        done, total, actions, masked = False, 0.0, [], 0
        while not done:
            slot = policy(obs, info["action_mask"])
            action = env.action(slot)
            actions.append(_describe(action))
            obs, reward, terminated, truncated, info = env.step(slot)
            masked += bool(info.get("masked_choice"))
            total += reward
            done = terminated or truncated
        outcome = _outcome(
            name,
            scenario,
            scenario.seed,
            info,
            steps=len(actions),
            total_reward=round(total, 4),
            wall_s=round(time.monotonic() - t0, 3),
            actions=actions,
            masked_choices=masked,
        )
        out.append(outcome)
        if on_episode is not None:
            on_episode(outcome)
    return out


def play_agent(
    env: MLSandboxEnv,
    agent: Callable[[int], Agent],
    scenarios: Sequence[Scenario],
    *,
    name: str,
    on_episode: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """One episode of an agent (made by ``agent(seed)``) per scenario, at the scenario's own seed, on the
    plain env (an agent writes its own actions)."""
    out: list[Outcome] = []
    for scenario in scenarios:
        res = run_episode(env, agent(scenario.seed), seed=scenario.seed, scenario=scenario)
        info = {**res.final_info, "grade": res.grade}
        outcome = _outcome(
            name,
            scenario,
            scenario.seed,
            info,
            steps=len(res.steps),
            total_reward=round(res.total_reward, 4),
            wall_s=round(res.wall_s, 3),
            actions=[_describe(s.action) if isinstance(s.action, dict) else str(s.action) for s in res.steps],
        )
        out.append(outcome)
        if on_episode is not None:
            on_episode(outcome)
    return out


@dataclass
class CurvePoint:
    """One point of a learning curve: after ``steps`` training steps (``wall_s`` seconds of training)."""

    steps: int
    wall_s: float
    success_rate: float
    """Share of the held-out scenarios the deterministic policy solves (played on the curve's env)."""
    mean_return: float
    train_success_rate: float | None
    """Share of the training episodes finished since the previous point that reached the goal."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Training:
    """What :func:`train` returns: the model (an sb3-contrib ``MaskablePPO``), its curve and cost."""

    model: MaskablePPO
    steps: int
    """PPO's environment steps (all in sim)."""
    wall_s: float
    """Training time in seconds (imitation and PPO; the curve's evaluations excluded)."""
    curve: list[CurvePoint]
    imitation_steps: int = 0
    """Steps of the expert's episodes the policy was warm-started on (0: PPO from scratch)."""


def train(
    scenarios: Sequence[Scenario],
    steps: int,
    *,
    seed: int = 0,
    eval_scenarios: Sequence[Scenario] = (),
    eval_every: int = 0,
    settings: dict[str, Any] | None = None,
    seeds_per_scenario: int = 4,
    imitation_episodes: int = 0,
    imitation_epochs: int = 200,
    on_point: Callable[[CurvePoint], None] | None = None,
) -> Training:
    """Train sb3-contrib's MaskablePPO (``"MlpPolicy"``, :data:`PPO_SETTINGS` updated by ``settings``)
    on the **sim** backend only, for ``steps`` environment steps, on episodes drawn from ``scenarios``
    (``seeds_per_scenario`` seeds each). Every ``eval_every`` steps (and at the end) the deterministic
    policy plays ``eval_scenarios`` in sim, one episode each, for the learning curve. Needs the ``rl``
    extra (PyTorch, Stable-Baselines3, sb3-contrib); PyTorch is kept to one thread.

    With ``imitation_episodes`` > 0 the policy is first warm-started in sim: :func:`expert_policy` plays
    that many training episodes and the policy network is fitted to its choices (cross-entropy over the
    masked action distribution, ``imitation_epochs`` passes) before PPO runs; the curve's first point
    (step 0) is the warm-started policy. The imitation episodes' steps are counted in
    :attr:`Training.imitation_steps`, not in ``steps``."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    try:
        import torch
        from sb3_contrib import MaskablePPO
        from stable_baselines3.common.callbacks import BaseCallback
    except ImportError as e:  # pragma: no cover - depends on the installed extras
        raise ImportError(f"training needs the rl extra (pip install 'mlsandbox[rl]'): {e}") from e
    torch.set_num_threads(1)
    env = transfer_env(scenarios, backend="sim", sandbox=f"transfer-train-{seed}",
                       seeds_per_scenario=seeds_per_scenario, setup=FAMILIES_SETUP)  # fmt: skip
    eval_env = (
        transfer_env(eval_scenarios, backend="sim", sandbox=f"transfer-eval-{seed}", setup=FAMILIES_SETUP)
        if eval_scenarios
        else None
    )
    curve: list[CurvePoint] = []
    recent: list[bool] = []
    t0 = time.monotonic()
    spent = 0.0  # seconds spent in evaluation, not counted as training time

    def point(model: MaskablePPO, done_steps: int) -> None:
        nonlocal spent
        t = time.monotonic()
        rate, ret = float("nan"), float("nan")
        if eval_env is not None:
            res = play(eval_env, model_policy(model), eval_scenarios, name="ppo")
            rate = success_rate(res)[0] / len(res)
            ret = float(np.mean([o.total_reward for o in res]))
        p = CurvePoint(
            steps=done_steps,
            wall_s=round(t - t0 - spent, 2),
            success_rate=rate,
            mean_return=round(ret, 4),
            train_success_rate=(sum(recent) / len(recent)) if recent else None,
        )
        recent.clear()
        curve.append(p)
        spent += time.monotonic() - t
        if on_point is not None:
            on_point(p)

    class _Curve(BaseCallback):
        def _on_step(self) -> bool:
            for info, done in zip(self.locals["infos"], self.locals["dones"], strict=True):
                if done:
                    recent.append(bool((info.get("grade") or {}).get("success")))
            if eval_every and self.num_timesteps % eval_every == 0 and self.num_timesteps < steps:
                assert isinstance(self.model, MaskablePPO)  # the algorithm this callback is given to
                point(self.model, self.num_timesteps)
            return True

    try:
        model = MaskablePPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0,
                            **{**PPO_SETTINGS, **(settings or {})})  # fmt: skip
        imitation_steps = 0
        if imitation_episodes > 0:
            imitation_steps = _imitate(model, env, imitation_episodes, imitation_epochs, seed)
            point(model, 0)
        model.learn(total_timesteps=steps, callback=_Curve())
        point(model, int(model.num_timesteps))
        wall = round(time.monotonic() - t0 - spent, 2)
    finally:
        env.close()
        if eval_env is not None:
            eval_env.close()
    return Training(
        model=model,
        steps=int(model.num_timesteps),
        wall_s=wall,
        curve=curve,
        imitation_steps=imitation_steps,
    )


def _imitate(model: MaskablePPO, env: DiscreteActions, episodes: int, epochs: int, seed: int) -> int:
    """Fit ``model``'s policy to :func:`expert_policy` on ``episodes`` episodes of ``env``; the steps."""
    import torch

    expert = expert_policy(env)
    observations, masks, actions = [], [], []
    obs, info = env.reset(seed=seed + 7919)
    for _ in range(episodes):
        done = False
        while not done:
            mask = np.asarray(info["action_mask"], dtype=bool)
            slot = expert(obs, mask)
            observations.append(obs)
            masks.append(mask)
            actions.append(slot)
            obs, _r, terminated, truncated, info = env.step(slot)
            done = terminated or truncated
        obs, info = env.reset()
    policy = model.policy
    o = torch.as_tensor(np.asarray(observations), dtype=torch.float32)
    m = np.asarray(masks)
    a = torch.as_tensor(np.asarray(actions), dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    batch = 64
    policy.set_training_mode(True)
    for _ in range(epochs):
        order = torch.randperm(len(a), generator=gen)
        for k in range(0, len(a), batch):
            idx = order[k : k + batch]
            _values, log_prob, _entropy = policy.evaluate_actions(o[idx], a[idx], action_masks=m[idx.numpy()])
            loss = -log_prob.mean()
            policy.optimizer.zero_grad()
            loss.backward()
            policy.optimizer.step()
    policy.set_training_mode(False)
    return len(a)


def success_rate(outcomes: Sequence[Outcome]) -> tuple[int, int]:
    """(successes, episodes)."""
    return sum(o.success for o in outcomes), len(outcomes)


def _describe(action: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={v}" for k, v in action.items() if k != "type")
    return f"{action.get('type')}({args})"


__all__ = [
    "FAMILIES",
    "FAMILIES_SETUP",
    "PPO_SETTINGS",
    "SETUP",
    "CurvePoint",
    "Outcome",
    "Policy",
    "Training",
    "expert_policy",
    "family_of",
    "model_policy",
    "play",
    "play_agent",
    "random_policy",
    "split",
    "success_rate",
    "train",
    "transfer_env",
]
