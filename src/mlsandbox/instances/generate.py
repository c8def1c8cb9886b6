"""``tasks generate``: draw candidates from a family's parameter space, gate each in ``sim``, keep the valid.

Candidates are drawn from a stream seeded by the family and the generation seed, so the same call makes
the same instances. With several worker processes the gates run in parallel, and results are still
taken in the order candidates were drawn (the output does not depend on the number of workers).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import util as mp_util
from typing import Any

from mlsandbox.env.gym_env import MLSandboxEnv
from mlsandbox.instances.gates import check, sim_env
from mlsandbox.instances.models import Instance, Rejection, params_hash
from mlsandbox.scenario import Scenario

MAX_ATTEMPTS_FACTOR = 4
"""A family gives up after gating this many candidates per instance asked for (a space that is mostly
invalid is reported, not searched for ever)."""


class NoSpaceError(ValueError):
    """The family declares no parameter space."""


@dataclass
class Generation:
    """What one family's generation produced."""

    family: str
    requested: int
    instances: list[Instance] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    duplicates: int = 0
    skipped: int = 0
    """Candidates another split owns (not run)."""

    @property
    def complete(self) -> bool:
        return len(self.instances) >= self.requested


def candidates(family: Scenario, seed: int) -> Iterator[dict[str, Any]]:
    """The family's endless, reproducible stream of parameter draws."""
    if family.space is None:
        raise NoSpaceError(f"family {family.id!r} declares no parameter space (a `space:` section)")
    rng = random.Random(f"{family.id}/{seed}")
    while True:
        yield family.space.draw(rng)


_ENV: MLSandboxEnv | None = None


def _worker_init() -> None:
    global _ENV
    _ENV = sim_env(f"gen-{os.getpid()}")
    mp_util.Finalize(None, _ENV.close, exitpriority=10)


def _worker_check(family: Scenario, params: dict[str, Any]) -> Instance | Rejection:
    assert _ENV is not None
    return check(_ENV, family, params)


class Gates:
    """Where gate episodes run: in this process (one ``sim`` env) or in a pool of worker processes
    (one ``sim`` env each). A context manager; reuse one for several families."""

    def __init__(self, workers: int = 1) -> None:
        self.workers = max(1, workers)
        self._env: MLSandboxEnv | None = None
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> Gates:
        if self.workers == 1:
            self._env = sim_env(f"gen-{os.getpid()}")
        else:
            self._pool = ProcessPoolExecutor(max_workers=self.workers, initializer=_worker_init)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._env is not None:
            self._env.close()
            self._env = None

    @property
    def window(self) -> int:
        """Candidates in flight at once."""
        return 1 if self._pool is None else self.workers * 2

    def submit(self, family: Scenario, params: dict[str, Any]) -> Future[Instance | Rejection]:
        if self._pool is not None:
            return self._pool.submit(_worker_check, family, params)
        if self._env is None:
            raise RuntimeError("Gates is used outside its `with` block")
        done: Future[Instance | Rejection] = Future()
        done.set_result(check(self._env, family, params))
        return done


def generate(
    family: Scenario,
    n: int,
    *,
    gates: Gates,
    seed: int = 0,
    accept: Callable[[str], bool] | None = None,
    on_result: Callable[[Instance | Rejection], None] | None = None,
    max_attempts: int | None = None,
) -> Generation:
    """Up to ``n`` valid instances of ``family``; ``accept`` (on the parameter hash) keeps only the
    candidates of one split."""
    out = Generation(family.id, n)
    stream = candidates(family, seed)
    limit = max_attempts if max_attempts is not None else max(n * MAX_ATTEMPTS_FACTOR, n + 20)
    seen: set[str] = set()
    tried = 0
    draws_left = limit * 100  # draws another split owns, or repeats, are not gated but are bounded too

    def next_candidate() -> dict[str, Any] | None:
        nonlocal tried, draws_left
        while tried < limit and draws_left > 0:
            params = next(stream)
            draws_left -= 1
            h = params_hash(family.id, params)
            if h in seen:
                out.duplicates += 1
                continue
            seen.add(h)
            if accept is not None and not accept(h):
                out.skipped += 1
                continue
            tried += 1
            return params
        return None

    pending: list[Future[Instance | Rejection]] = []
    exhausted = False
    try:
        while not out.complete:
            # Never more in flight than could still be needed.
            while not exhausted and len(pending) < min(gates.window, out.requested - len(out.instances)):
                params = next_candidate()
                if params is None:
                    exhausted = True
                    break
                pending.append(gates.submit(family, params))
            if not pending:
                break
            result = pending.pop(0).result()  # in draw order: the same output for any worker count
            if isinstance(result, Instance):
                out.instances.append(result)
            else:
                out.rejected.append(result)
            if on_result:
                on_result(result)
    finally:
        for f in pending:
            f.cancel()
    return out


__all__ = ["MAX_ATTEMPTS_FACTOR", "Gates", "Generation", "NoSpaceError", "candidates", "generate"]
