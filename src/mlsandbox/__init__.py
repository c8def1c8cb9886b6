"""mlsandbox: a real-execution sandbox for training and evaluating ML-engineering agents.

Importing the package registers the Gymnasium environments ``mlsandbox/MLSandbox-v0`` and
``mlsandbox/RemoteMLSandbox-v0``: at once when Gymnasium is already imported, otherwise as soon as it is
(so ``import mlsandbox`` alone, as every command line does, does not pay Gymnasium's import, about 0.3 s).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

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


class _RegisterWhenGymnasiumLoads(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``gymnasium`` is first imported, wraps the real loader so that the
    environments are registered once the package has loaded, then leaves ``sys.meta_path``."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "gymnasium":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = None
        for finder in list(sys.meta_path):  # the finders that would have found it without this one
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            _register()

        loader.exec_module = exec_module  # type: ignore[method-assign, unused-ignore]
        return spec


if "gymnasium" in sys.modules:
    _register()
elif not any(isinstance(f, _RegisterWhenGymnasiumLoads) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterWhenGymnasiumLoads())
