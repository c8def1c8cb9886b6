"""The Gymnasium environment ``mlsandbox/MLSandbox-v0``.

Observation: a ``Dict`` space with a few numbers for RL code (``step``, ``ok``, ``credits_left``) and
``text``, the whole structured observation as compact JSON (decode it with :func:`decode_observation`).
Action: a JSON object (dict, JSON string or action model) with a ``type``; the action space is a ``Text``
space of JSON strings, so a sampled action is almost always invalid and simply earns an error observation.

The environment attaches to a running sandbox, or starts one itself (``start_sandbox=True``) and stops it
on ``close()``. ``reset`` starts an isolated episode on the running services without restarting them.
The env is registered as nondeterministic: steps run real processes whose timings and CPU-seconds vary
from run to run. The first observation after ``reset(seed=s)`` is identical for the same seed and scenario.

What wrappers and tools read of the running episode is public: :attr:`MLSandboxEnv.episode` (its state),
:attr:`~MLSandboxEnv.last_observation`, :meth:`~MLSandboxEnv.budget`, :meth:`~MLSandboxEnv.supports`,
:meth:`~MLSandboxEnv.job_status`, and :meth:`~MLSandboxEnv.refusing` to refuse action types for a while.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import gymnasium as gym

from mlsandbox.backends import get_backend
from mlsandbox.backends.protocols import Backend, JobStatus, Runtime
from mlsandbox.env.dashboard import from_gateway, render_dashboard
from mlsandbox.env.spaces import (
    RENDER_MODES,
    action_space,
    agent_option,
    check_render_mode,
    decode_observation,
    encode_observation,
    episode_seed,
    observation_space,
    scenario_option,
)
from mlsandbox.errors import NotRunningError
from mlsandbox.gateway import Gateway
from mlsandbox.paths import default_sandbox_name
from mlsandbox.scenario import Scenario, load_scenario
from mlsandbox.world.episode import EpisodeState

KUBE_READY_WAIT_S = 90.0
"""How long a kube env waits for its sandbox's services to be ready again before it says they are not."""


class MLSandboxEnv(gym.Env[dict[str, Any], str]):
    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 1}

    def __init__(
        self,
        scenario: str | Scenario = "tabular-quality-basic",
        *,
        backend: str = "local",
        sandbox: str | None = None,
        start_sandbox: bool = True,
        render_mode: str | None = None,
        vector_kwargs: dict[str, Any] | None = None,
        backend_config: dict[str, Any] | None = None,
    ) -> None:
        # ``vector_kwargs`` is the registration's advice to gymnasium.make_vec (no shared memory for Text
        # observations); a single env ignores it.
        self.render_mode = check_render_mode(render_mode)
        self.scenario = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        self.sandbox_name = sandbox or default_sandbox_name()
        # ``backend_config``: fields of the backend's typed config (sim: seed, calibration, audit_dir, ...).
        self._backend: Backend = get_backend(backend, self.sandbox_name, **(backend_config or {}))
        self._start_sandbox = start_sandbox
        self._owns_sandbox = False
        self._runtime: Runtime | None = None
        self.gateway: Gateway | None = None
        """The running episode's gateway (None between episodes), for tools that inspect an episode in
        depth; wrappers and integrations read the accessors below instead."""
        self._last: dict[str, Any] | None = None
        self._last_info: dict[str, Any] = {}
        self.action_space = action_space()
        self.observation_space = observation_space()

    # ------------------------------------------------------------------------------------ gym API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        t0 = time.perf_counter()
        ref = scenario_option(options)
        if ref is not None:
            self.scenario = ref if isinstance(ref, Scenario) else load_scenario(ref)
        runtime = self._ensure_runtime()
        self._end_episode()
        ep_seed = episode_seed(seed, self.np_random)
        self.gateway = Gateway(
            runtime,
            self.scenario,
            seed=ep_seed,
            sandbox=self.sandbox_name,
            labels={"interface": "env", **({"agent": a} if (a := agent_option(options)) else {})},
        )
        obs = self.gateway.start()
        self._last = obs
        info = {
            "episode_id": self.gateway.state.episode_id,
            "scenario": self.scenario.id,
            "seed": ep_seed,
            "sandbox": self.sandbox_name,
            "owns_sandbox": self._owns_sandbox,
            "timings": {"reset_s": round(time.perf_counter() - t0, 6)},
        }
        self._last_info = info
        return encode_observation(obs), info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self.gateway is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        res = self.gateway.step(action)
        self._last = res.observation
        self._last_info = res.info
        return encode_observation(res.observation), res.reward, res.terminated, res.truncated, res.info

    def render(self) -> str | None:  # type: ignore[override, unused-ignore]  # gymnasium < 1.3: a TypeVar
        if self.render_mode != "ansi":
            return None
        return render_ansi(self._last, self._last_info, self.gateway, self._backend)

    def close(self) -> None:
        self._end_episode()
        if self._owns_sandbox:
            self._backend.down()
            self._owns_sandbox = False
        self._runtime = None
        super().close()

    # ---------------------------------------------------------------------- the episode (read-only)

    @property
    def episode_running(self) -> bool:
        """Whether an episode runs: ``reset`` was called and ``close`` was not since."""
        return self.gateway is not None

    @property
    def episode(self) -> EpisodeState:
        """The running episode's state (step, datasets, jobs, credits, registrations, ...), to read only;
        :class:`gymnasium.error.ResetNeeded` when no episode runs."""
        return self._running().state

    @property
    def last_observation(self) -> dict[str, Any] | None:
        """The last structured observation (of ``reset`` or of the last step; what
        :func:`decode_observation` gives from the env's observation), to read only; None before the first
        ``reset``."""
        return self._last

    def budget(self) -> dict[str, Any]:
        """The running episode's budget now (``credits``, ``credits_used``, ``steps_left``), as an
        observation carries it."""
        return self._running().budget()

    def supports(self, capability: str) -> bool:
        """Whether the running episode's backend supports ``capability`` (a key of its support declaration,
        such as ``faults.services``)."""
        return self._running().runtime.support().reason(capability) is None

    def job_status(self, job_id: str) -> JobStatus:
        """The backend's status of the running episode's job ``job_id`` (state, times, CPU-seconds), read
        through the episode's compute pool; ``KeyError`` for a job the episode does not have."""
        gw = self._running()
        return gw.pool.get(gw.state.jobs[job_id].backend_id)

    @contextmanager
    def refusing(self, actions: Mapping[str, str]) -> Iterator[None]:
        """Within the block, steps refuse the action types of ``actions`` (type -> reason) as the gateway
        refuses a denied action: a ``forbidden`` error observation, its penalty, nothing done."""
        gw = self._running()
        policy = dict(gw.denied_actions)
        gw.denied_actions = {**policy, **actions}
        try:
            yield
        finally:
            gw.denied_actions = policy

    # -------------------------------------------------------------------------------------- helpers

    @property
    def backend(self) -> Backend:
        return self._backend

    def _running(self) -> Gateway:
        if self.gateway is None:
            raise gym.error.ResetNeeded("no episode is running: call reset() first")
        return self.gateway

    def _ensure_runtime(self) -> Runtime:
        if self._runtime is not None:
            return self._runtime
        alive = self._backend.is_alive()
        if not alive and not self._start_sandbox and self._backend.kind == "kube":
            # A Sandbox of a cluster, not started from here: a service restarting after the last
            # episode's fault is waited for, within a bound.
            alive = self._kube_comes_back()
            if not alive:
                raise NotRunningError(
                    f"sandbox {self.sandbox_name!r} is not ready, or a service of its cluster is not "
                    f"(waited {KUBE_READY_WAIT_S:.0f} s): see `mlsandbox cluster status`"
                )
        if not alive:
            if not self._start_sandbox:
                raise NotRunningError(
                    f"sandbox {self.sandbox_name!r} is not running: start it with `mlsandbox up --name {self.sandbox_name}`"
                    " or create the env with start_sandbox=True"
                )
            self._backend.up(ephemeral=True)
            self._owns_sandbox = True
        self._runtime = self._backend.runtime()
        return self._runtime

    def _kube_comes_back(self) -> bool:
        """Whether the kube sandbox is alive within :data:`KUBE_READY_WAIT_S`: a service the last episode's
        fault stopped is scaled back at its end, and its pod takes a while to be ready again."""
        deadline = time.monotonic() + KUBE_READY_WAIT_S
        while time.monotonic() < deadline:
            time.sleep(2.0)
            if self._backend.is_alive():
                return True
        return False

    def _end_episode(self) -> None:
        if self.gateway is not None:
            self.gateway.close()
            self.gateway = None


def render_ansi(
    obs: dict[str, Any] | None, info: dict[str, Any], gateway: Gateway | None, backend: Backend | None = None
) -> str:
    """A compact text dashboard of the episode for people watching it (see :mod:`mlsandbox.env.dashboard`)."""
    if obs is None or gateway is None:
        return "(no episode)\n"
    services: list[tuple[str, str]] = []
    if backend is not None:
        try:
            services = [(s.name, s.state) for s in backend.status()]
        except Exception:  # a dashboard never breaks an episode
            services = []
    return render_dashboard(from_gateway(gateway, obs, info, services))


__all__ = ["MLSandboxEnv", "decode_observation"]
