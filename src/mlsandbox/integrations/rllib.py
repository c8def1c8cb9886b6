"""mlsandbox under RLlib's API stack (``mlsandbox[ray]``): PPO with EnvRunners on sandboxes.

The env RLlib sees is the RL wrapper stack of :func:`mlsandbox.env.wrappers.make_rl_env` (a ``Discrete``
action over concrete actions, a ``Box`` observation in [0, 1]), with the action mask beside the
observation (``{"action_mask", "observations"}``, what RLlib's action-masking RLModule reads), so the
policy only samples actions the gateway would carry out.

Where the episodes run, per :class:`RLlibEnvConfig`:

- **a shared running sandbox** (``sandbox=NAME``, the vectorised-env pattern): every env of every
  EnvRunner (each a Ray actor, a process of its own) runs its own isolated episodes on the same services;
  start it first (``mlsandbox up --name NAME``);
- **a Sandbox per EnvRunner** (``backend="kube"``, ``sandbox_per_runner=True``): EnvRunner ``i`` claims the
  Sandbox ``<claim_prefix>-<i>`` from the operator (:mod:`mlsandbox.integrations.kube_claims`), so on a
  KubeRay cluster rollouts spread over namespaces and nodes (manifests: ``examples/kuberay``); with
  ``claim_pool=NAME`` the claim is a ``SandboxClaim`` on that ``SandboxPool``, bound at once to an already
  Ready Sandbox, which returns to the pool after a warm reset when the runner is done;
- **in-process envs** (``backend="sim"``): each env of each EnvRunner is a sim sandbox of its own, in the
  EnvRunner's process (memory, a virtual clock, the calibrated surrogate): no service to start, no
  sandbox to share, and steps at the speed of the simulator.

.. code-block:: python

    import ray
    from mlsandbox.integrations.rllib import ppo_config

    ray.init()
    algo = ppo_config(sandbox="rl", num_env_runners=2).build_algo()
    print(algo.train()["env_runners"]["episode_return_mean"])

``python -m mlsandbox.integrations.rllib --help`` trains from the command line (what the RayJob runs).
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field

from mlsandbox.env.wrappers import in_process_env, make_rl_env
from mlsandbox.integrations import require

if TYPE_CHECKING:
    from mlsandbox.integrations.kube_claims import SandboxClaim

ENV_NAME = "mlsandbox"
FAST_ACTIONS = (
    "list_datasets",
    "check_data_quality",
    "train_model",
    "get_job",
    "register_model",
    "wait",
    "submit",
)
"""A small action set that can solve the training scenarios (shorter masks, faster learning)."""


def fast_scenario() -> str:
    """The path of ``rl-fast``: a 6-step scenario for training loops (300 rows, one small model)."""
    return str(resources.files("mlsandbox.env") / "scenarios" / "rl-fast.yaml")


class RLlibEnvConfig(BaseModel):
    """What RLlib's ``env_config`` holds for the mlsandbox env (unknown keys are an error)."""

    model_config = ConfigDict(extra="forbid")

    scenario: str = Field(default_factory=fast_scenario, description="A built-in id or a scenario file.")
    backend: str = Field(default="local", description="local | kube | sim, or a plug-in backend.")
    sandbox: str | None = Field(
        default=None, description="The shared sandbox (default: MLSANDBOX_NAME); on sim, each env's own name."
    )
    sandbox_per_runner: bool = Field(
        default=False, description="kube: each EnvRunner claims the Sandbox <claim_prefix>-<worker index>."
    )
    claim_prefix: str = Field(default="rllib", pattern=r"^[a-z][a-z0-9-]{0,30}$")
    claim_spec: dict[str, Any] = Field(
        default_factory=dict, description="Sandbox spec besides scenario/seed."
    )
    claim_scenario: str = Field(
        default="tabular-quality-basic", description="The claimed Sandbox's scenario."
    )
    claim_pool: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$",
        description="Claim from this SandboxPool (a SandboxClaim bound to a Ready member) instead of "
        "creating a Sandbox; its template sets the scenario.",
    )
    action_types: list[str] | None = Field(default_factory=lambda: list(FAST_ACTIONS))
    algorithms: list[str] | None = Field(default_factory=lambda: ["logistic_regression"])
    wait_seconds: list[float] = Field(default_factory=lambda: [1.0])
    max_datasets: int = Field(default=4, ge=1)
    max_jobs: int = Field(default=3, ge=1)
    action_mask: bool = Field(default=True, description="Observations as {action_mask, observations}.")
    instances: int | None = Field(
        default=None,
        ge=1,
        description="Each episode at one of this many seeds from the scenario's own (a train split, whose "
        "fits the sim fit store serves again); None: a new seed each episode.",
    )


class ActionMaskObservation(gym.ObservationWrapper[dict[str, np.ndarray], np.int64, np.ndarray]):
    """``{"action_mask": mask of the valid actions now, "observations": the flat observation}``."""

    def __init__(self, env: gym.Env[np.ndarray, np.int64]) -> None:
        super().__init__(env)
        n = int(env.action_space.n)  # type: ignore[attr-defined]
        space: gym.Space[dict[str, np.ndarray]] = spaces.Dict(  # type: ignore[assignment, unused-ignore]
            {
                "action_mask": spaces.Box(0.0, 1.0, shape=(n,), dtype=np.float32),
                "observations": env.observation_space,
            }
        )
        self.observation_space = space

    def observation(self, observation: np.ndarray) -> dict[str, np.ndarray]:
        mask = np.asarray(self.env.action_masks(), dtype=np.float32)  # type: ignore[attr-defined]
        return {"action_mask": mask, "observations": observation}


# ------------------------------------------------------------------------------------ claims per process

_CLAIMS: dict[str, SandboxClaim] = {}
_USERS: dict[str, int] = {}
_LOCK = threading.Lock()


def _claim(cfg: RLlibEnvConfig, worker_index: int) -> tuple[str, str]:
    """The claim of this EnvRunner, made once per process and shared by its envs (released when the last
    of them closes, or at exit), and the Sandbox it holds."""
    from mlsandbox.integrations.kube_claims import SandboxClaim, claim_name

    name = claim_name(cfg.claim_prefix, worker_index)
    with _LOCK:
        claim = _CLAIMS.get(name)
        if claim is None:
            claim = SandboxClaim(name, scenario=cfg.claim_scenario, spec=cfg.claim_spec, pool=cfg.claim_pool)
            claim.acquire()
            _CLAIMS[name] = claim
        _USERS[name] = _USERS.get(name, 0) + 1
    return name, str(claim.sandbox)


def _unclaim(name: str) -> None:
    with _LOCK:
        _USERS[name] = _USERS.get(name, 1) - 1
        if _USERS[name] <= 0 and name in _CLAIMS:
            _CLAIMS.pop(name).release()


@atexit.register
def _release_all() -> None:
    for name in list(_CLAIMS):
        with contextlib.suppress(Exception):
            _CLAIMS.pop(name).release()


class _ClaimRelease(gym.Wrapper[Any, Any, Any, Any]):
    def __init__(self, env: gym.Env[Any, Any], claim: str) -> None:
        super().__init__(env)
        self._claim_name: str | None = claim

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._claim_name is not None:
                name, self._claim_name = self._claim_name, None
                _unclaim(name)


# ------------------------------------------------------------------------------------------- the env


def env_creator(env_config: Any) -> gym.Env[Any, Any]:
    """RLlib's env creator: ``env_config`` is an :class:`RLlibEnvConfig` as a dict (RLlib passes it as an
    ``EnvContext``, whose ``worker_index`` names the EnvRunner: 0 on the driver, 1.. on the runners)."""
    keys = {k: v for k, v in dict(env_config).items() if k != "num_envs"}
    cfg = RLlibEnvConfig.model_validate(keys)
    worker_index = int(getattr(env_config, "worker_index", 0) or 0)
    sandbox = cfg.sandbox
    claimed: str | None = None
    if cfg.sandbox_per_runner:
        if cfg.backend != "kube":
            raise ValueError("sandbox_per_runner claims Sandboxes from the operator: it needs backend='kube'")
        claimed, sandbox = _claim(cfg, worker_index)
    env: gym.Env[Any, Any] = make_rl_env(
        cfg.scenario,
        backend=cfg.backend,
        sandbox=sandbox,
        start_sandbox=False,
        action_types=cfg.action_types,
        algorithms=cfg.algorithms,
        wait_seconds=cfg.wait_seconds,
        max_datasets=cfg.max_datasets,
        max_jobs=cfg.max_jobs,
        instances=cfg.instances,
    )
    if cfg.action_mask:
        env = ActionMaskObservation(env)
    if claimed is not None:
        env = _ClaimRelease(env, claimed)
    return env


def describe_runner(runner: Any) -> dict[str, Any]:
    """What an EnvRunner holds (for ``algo.env_runner_group.foreach_env_runner(describe_runner)``): its
    process, worker index, and per env the sandbox, the current episode and its invalid actions."""
    import os

    envs = []
    for env in getattr(runner.env.unwrapped, "envs", []):
        inner = in_process_env(env)
        episode = inner.episode if inner.episode_running else None
        envs.append(
            {
                "sandbox": inner.sandbox_name,
                "backend": inner.backend.kind,
                "episode": episode.episode_id if episode else None,
                "step": episode.step if episode else None,
                "invalid_actions": episode.invalid_actions if episode else None,
            }
        )
    return {"pid": os.getpid(), "worker_index": runner.worker_index, "envs": envs}


def register(name: str = ENV_NAME) -> str:
    """Register :func:`env_creator` with Ray Tune's registry under ``name`` (what ``.environment(name)``
    looks up, on the driver and on every EnvRunner); the name."""
    tune_registry = require("ray.tune.registry", "ray")
    tune_registry.register_env(name, env_creator)
    return name


def ppo_config(
    *,
    env_config: RLlibEnvConfig | dict[str, Any] | None = None,
    sandbox: str | None = None,
    backend: str | None = None,
    num_env_runners: int = 2,
    num_envs_per_env_runner: int = 1,
    rollout_fragment_length: int = 12,
    train_batch_size: int | None = None,
    minibatch_size: int = 12,
    num_epochs: int = 2,
    lr: float = 3e-4,
    hidden: Sequence[int] = (32, 32),
    seed: int | None = None,
) -> Any:
    """A ``PPOConfig`` on the new API stack for the mlsandbox env: ``num_env_runners`` EnvRunner actors
    (0: sample on the driver), small batches (episodes are real and slow), and RLlib's action-masking
    RLModule when the env reports masks. ``sandbox``/``backend`` override ``env_config``'s."""
    ppo = require("ray.rllib.algorithms.ppo", "ray")
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    cfg = (
        RLlibEnvConfig.model_validate(env_config or {})
        if not isinstance(env_config, RLlibEnvConfig)
        else env_config
    )
    updates = {k: v for k, v in (("sandbox", sandbox), ("backend", backend)) if v is not None}
    cfg = cfg.model_copy(update=updates)
    name = register()
    batch = train_batch_size or rollout_fragment_length * max(1, num_env_runners) * num_envs_per_env_runner
    config = (
        ppo.PPOConfig()
        .environment(name, env_config=cfg.model_dump())
        .env_runners(
            num_env_runners=num_env_runners,
            num_envs_per_env_runner=num_envs_per_env_runner,
            rollout_fragment_length=rollout_fragment_length,
            sample_timeout_s=600.0,
        )
        .learners(num_learners=0)
        .training(
            train_batch_size_per_learner=batch, minibatch_size=minibatch_size, num_epochs=num_epochs, lr=lr
        )
        .debugging(seed=seed)
    )
    model = {"fcnet_hiddens": list(hidden), "head_fcnet_hiddens": []}
    if cfg.action_mask:
        masking = require("ray.rllib.examples.rl_modules.classes.action_masking_rlm", "ray")
        config = config.rl_module(
            rl_module_spec=RLModuleSpec(module_class=masking.ActionMaskingTorchRLModule, model_config=model)
        )
    else:
        config = config.rl_module(model_config=model)
    return config


__all__ = [
    "ENV_NAME",
    "FAST_ACTIONS",
    "ActionMaskObservation",
    "RLlibEnvConfig",
    "build_parser",
    "describe_runner",
    "env_creator",
    "fast_scenario",
    "main",
    "ppo_config",
    "register",
]


# ------------------------------------------------------------------------------------------ command line


def build_parser() -> Any:
    """The command line of ``python -m mlsandbox.integrations.rllib`` (also what the RayJob runs)."""
    import argparse
    from pathlib import Path

    p = argparse.ArgumentParser(
        prog="python -m mlsandbox.integrations.rllib",
        description="Train PPO on mlsandbox episodes with RLlib, one JSON line per iteration.",
    )
    p.add_argument("--scenario", default=None, help="built-in id or file (default: rl-fast)")
    p.add_argument("--backend", default="local", help="local | kube | sim")
    p.add_argument("--sandbox", default=None, help="the shared sandbox (default: MLSANDBOX_NAME)")
    p.add_argument("--sandbox-per-runner", action="store_true", help="kube: each EnvRunner claims a Sandbox")
    p.add_argument("--claim-prefix", default="rllib")
    p.add_argument("--claim-scenario", default="tabular-quality-basic")
    p.add_argument(
        "--claim-pool", default=None, help="kube: claim from this SandboxPool (warm, already Ready Sandboxes)"
    )
    p.add_argument("--runners", type=int, default=2, help="EnvRunner actors (0: sample on the driver)")
    p.add_argument("--envs-per-runner", type=int, default=1)
    p.add_argument("--fragment", type=int, default=12, help="rollout fragment length per env")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--address", default=None, help="Ray cluster address (auto in a RayJob; default: local)")
    p.add_argument("--out", type=Path, default=None, help="write the iterations' figures here as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mlsandbox.integrations.rllib``: train PPO on mlsandbox episodes, one line per iteration."""
    import json
    import os
    import time

    args = build_parser().parse_args(argv)
    ray = require("ray", "ray")
    env_config: dict[str, Any] = {
        "backend": args.backend,
        "sandbox": args.sandbox or os.environ.get("MLSANDBOX_NAME"),
        "sandbox_per_runner": args.sandbox_per_runner,
        "claim_prefix": args.claim_prefix,
        "claim_scenario": args.claim_scenario,
        "claim_pool": args.claim_pool,
    }
    if args.scenario:
        env_config["scenario"] = fast_scenario() if args.scenario == "rl-fast" else args.scenario
    config = ppo_config(
        env_config=env_config,
        num_env_runners=args.runners,
        num_envs_per_env_runner=args.envs_per_runner,
        rollout_fragment_length=args.fragment,
    )
    ray.init(address=args.address or os.environ.get("RAY_ADDRESS"), include_dashboard=False)
    rows = []
    algo = config.build_algo()
    try:
        for i in range(1, args.iterations + 1):
            t0 = time.perf_counter()
            result = algo.train()
            runners = result["env_runners"]
            row = {
                "iteration": i,
                "seconds": round(time.perf_counter() - t0, 3),
                "env_steps": int(runners["num_env_steps_sampled_lifetime"]),
                "episodes": int(runners.get("num_episodes_lifetime", 0)),
                "episode_return_mean": float(runners.get("episode_return_mean", float("nan"))),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        algo.stop()
        ray.shutdown()
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":  # run through the importable module, so Ray pickles its functions by reference
    import sys

    from mlsandbox.integrations import rllib as _module

    sys.exit(_module.main())
