"""Gymnasium interface: ``mlsandbox/MLSandbox-v0`` (registered by ``import mlsandbox``)."""

from mlsandbox.env.gym_env import MLSandboxEnv, decode_observation

__all__ = ["MLSandboxEnv", "decode_observation"]
