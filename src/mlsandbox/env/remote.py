"""``MLSandboxEnv`` over HTTP: the same spaces and observations, one gateway session per env."""

from __future__ import annotations

import contextlib
from typing import Any

import gymnasium as gym
import httpx
from gymnasium.envs.registration import EnvSpec

from mlsandbox.env.dashboard import from_audit, render_dashboard
from mlsandbox.env.spaces import (
    RENDER_MODES,
    action_space,
    check_render_mode,
    encode_observation,
    episode_seed,
    observation_space,
    scenario_option,
)
from mlsandbox.gateway.client import GatewayClient, GatewayHTTPError
from mlsandbox.gateway.sessions import SessionOptions

REMOTE_ENV_ID = "mlsandbox/RemoteMLSandbox-v0"


class RemoteMLSandboxEnv(gym.Env[dict[str, Any], str]):
    """``MLSandboxEnv`` over HTTP: each env is one gateway session (created on the first ``reset``)."""

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 1}

    def __init__(
        self,
        url: str | None = None,
        scenario: str = "tabular-quality-basic",
        *,
        client: GatewayClient | None = None,
        options: SessionOptions | dict[str, Any] | None = None,
        render_mode: str | None = None,
        vector_kwargs: dict[str, Any] | None = None,
    ) -> None:
        # ``vector_kwargs`` is the registration's advice to gymnasium.make_vec (no shared memory for Text
        # observations); a single env ignores it.
        if client is None and url is None:
            raise ValueError("give the gateway's url or a GatewayClient")
        self.render_mode = check_render_mode(render_mode)
        self.scenario = scenario
        self.session_options = options
        self._owns_client = client is None
        self.client = client or GatewayClient(str(url))
        if self.spec is None:  # steps run real processes remotely: like MLSandboxEnv, nondeterministic
            self.spec = EnvSpec(
                REMOTE_ENV_ID,
                entry_point=f"{__name__}:RemoteMLSandboxEnv",
                nondeterministic=True,
                kwargs={
                    "url": url or str(self.client.http.base_url),
                    "scenario": scenario,
                    "options": options,
                },
            )
        self.session_id: str | None = None
        self._last: dict[str, Any] | None = None
        self._last_info: dict[str, Any] = {}
        self._records: list[dict[str, Any]] = []
        self.action_space = action_space()
        self.observation_space = observation_space()

    @property
    def last_observation(self) -> dict[str, Any] | None:
        """The last structured observation (of ``reset`` or of the last step), to read only; None before the
        first ``reset`` (as the in-process env's)."""
        return self._last

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        ref = scenario_option(options)
        if ref is not None:
            self.scenario = str(ref)
        ep_seed = episode_seed(seed, self.np_random)
        if self.session_id is None:
            created = self.client.create_session(self.scenario, seed=ep_seed, options=self.session_options)
            self.session_id = created.session_id
            obs, info = created.observation, created.info
        else:
            res = self.client.reset(self.session_id, seed=ep_seed, scenario=self.scenario)
            obs, info = res.observation, res.info
        self._last = obs.model_dump(exclude_unset=True)
        self._last_info = info
        self._records = [{"event": "start", "episode": info.get("episode_id"), "scenario": self.scenario}]
        return encode_observation(self._last), info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self.session_id is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        res = self.client.step(self.session_id, action)
        self._last = res.observation.model_dump(exclude_unset=True)
        self._last_info = res.info
        self._records.append(
            {"event": "step", "observation": self._last, "info": res.info, "reward": res.reward}
        )
        return encode_observation(self._last), res.reward, res.terminated, res.truncated, res.info

    def render(self) -> str | None:  # type: ignore[override, unused-ignore]  # gymnasium < 1.3: a TypeVar
        if self.render_mode != "ansi":
            return None
        if self._last is None:
            return "(no episode)\n"
        return render_dashboard(from_audit(self._records))  # replayed from the steps seen over HTTP

    def close(self) -> None:
        if self.session_id is not None:
            with contextlib.suppress(GatewayHTTPError, httpx.HTTPError):
                self.client.close(self.session_id)
            self.session_id = None
        if self._owns_client:
            self.client.shutdown()
        super().close()


__all__ = ["REMOTE_ENV_ID", "RemoteMLSandboxEnv"]
