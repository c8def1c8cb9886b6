"""mlsandbox: a real-execution sandbox for training and evaluating ML-engineering agents.

Importing the package registers the Gymnasium environment ``mlsandbox/MLSandbox-v0``.
"""

from __future__ import annotations

__version__ = "0.1.0"


def _register() -> None:
    try:
        from gymnasium.envs.registration import register, registry
    except ImportError:  # a slim workload image without gymnasium: nothing to register
        return

    if "mlsandbox/MLSandbox-v0" not in registry:
        register(
            id="mlsandbox/MLSandbox-v0",
            entry_point="mlsandbox.env.gym_env:MLSandboxEnv",
            # gymnasium.make_vec reads this: Text observations cannot live in shared memory (an async
            # vector env would return the buffer's stale contents), so workers send them through pipes.
            kwargs={"vector_kwargs": {"shared_memory": False}},
            # Steps run real processes: job durations and CPU-seconds differ between runs.
            nondeterministic=True,
        )
    if "mlsandbox/RemoteMLSandbox-v0" not in registry:
        register(
            id="mlsandbox/RemoteMLSandbox-v0",
            entry_point="mlsandbox.env.remote:RemoteMLSandboxEnv",
            kwargs={"vector_kwargs": {"shared_memory": False}},
            nondeterministic=True,
        )


_register()
