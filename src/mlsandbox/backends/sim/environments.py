"""Named Python environments of a ``sim`` sandbox (:class:`SimEnvironments`): resolved, not installed.

Requirements are parsed as on local (PEP 508 names and version specifiers only); each distribution is
resolved to the default environment's version when it satisfies the specifier, else to the newest
version the calibration knows that does; requirements nothing satisfies fail with the resolver's message.
A build is charged the calibrated build time. The key is a content address of the normalised
requirements, as on local. Jobs, flow runs and replicas in a named environment behave as in the default
one: the surrogate fits with the sandbox's own releases, so an environment that would put another
version of numpy, pandas or scipy in place of the default's is refused with
:class:`~mlsandbox.errors.Unsupported` (``environments.build``) rather than faked. Another scikit-learn
is allowed where the calibration measured what the default release's models do under it
(``portability``): a model keeps the release of the environment it was made in, and scoring it in
another environment (:meth:`SimEnvironments.score`, a production scorer pinned to a release) fails with
the library's error or works as the measurement says, per algorithm.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from mlsandbox.backends.common.uv import normalise
from mlsandbox.backends.protocols import (
    DEFAULT_KEY,
    EnvironmentBuildError,
    EnvironmentInfo,
    ModelScoreError,
    Unsupported,
)
from mlsandbox.backends.sim.world import SimWorld

if TYPE_CHECKING:
    from mlsandbox.backends.sim.tracking import MemoryTracking

SERVER_REQUIREMENTS = ("fastapi", "uvicorn", "prometheus-client", "orjson", "mlflow")
MODELLED = ("scikit-learn", "numpy", "pandas", "scipy")
"""Libraries whose version changes what a workload does (a named environment may not change them here)."""
"""What the model server adds to an environment (``for_serving``)."""


class SimEnvironments:
    """See the module docstring (:class:`~mlsandbox.backends.protocols.Environments`)."""

    def __init__(self, world: SimWorld, tracking: MemoryTracking | None = None) -> None:
        self.world = world
        self.tracking = tracking
        self.cal = world.calibration.environments
        self.built: dict[str, EnvironmentInfo] = {}

    def default(self) -> EnvironmentInfo:
        return EnvironmentInfo(key=DEFAULT_KEY, requirements=[], packages=dict(self.cal.default_packages))

    def build(self, requirements: list[str]) -> EnvironmentInfo:
        reqs = normalise(requirements)
        key = hashlib.sha256(json.dumps(["sim", reqs]).encode()).hexdigest()[:16]
        found = self.built.get(key)
        if found is not None:
            return found
        packages = dict(self.cal.default_packages)
        for text in reqs:
            req = Requirement(text)
            name = req.name.lower()
            default = self.cal.default_packages.get(name)
            if default is not None and req.specifier.contains(default, prereleases=True):
                packages[name] = default
                continue
            portable = self._portable(req) if name == "scikit-learn" else None
            if portable is not None:
                packages[name] = portable
                continue
            if name in MODELLED:
                raise Unsupported(
                    "environments.build",
                    "sim",
                    f"{text} in place of the default's {req.name} {default}: the simulator models only the "
                    "scikit-learn releases whose behaviour was measured (a model saved under one release and "
                    "loaded under another); run this on the local backend",
                )
            candidates = [v for v in self.cal.known_versions.get(name, []) if req.specifier.contains(v)]
            pinned = [
                s.version for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version
            ]
            lower = [s.version for s in req.specifier if s.operator in (">=", "~=")]
            if candidates:
                packages[name] = max(candidates, key=_version_key)
            elif pinned or lower:
                packages[name] = (pinned or lower)[0]
            elif name in self.cal.known_versions:
                detail = f"there is no version of {req.name}{req.specifier} and you require {text}"
                self.world.clock.charge(1.0)
                raise EnvironmentBuildError(self.cal.resolution_error.text.format(detail=detail))
            else:
                packages[name] = "(latest)"
        self.world.clock.charge(self.cal.build_s)
        info = EnvironmentInfo(key=key, requirements=reqs, packages=packages)
        self.built[key] = info
        return info

    def _portable(self, req: Requirement) -> str | None:
        """The scikit-learn release a requirement resolves to when the calibration knows what the default
        release's models do under it (:attr:`EnvironmentsModel.portability`), else None."""
        default = self.cal.default_packages.get("scikit-learn")
        known = sorted(
            {
                p.loaded
                for p in self.cal.portability
                if p.made == default and req.specifier.contains(p.loaded)
            },
            key=_version_key,
        )
        return known[-1] if known else None

    def score(self, key: str, model_name: str, version: str, rows: Any) -> list[float]:
        """A model made under the release of this environment predicts with its real estimator; one made
        under another release fails as the calibration measured it did, per algorithm (or works where it
        did). The scorer's time is charged either way."""
        env = self.get(key)
        self.world.clock.charge(self.cal.score_s)
        if self.tracking is None:
            raise ModelScoreError("no tracking to load the model from")
        made = self.tracking.made_with(model_name, version)
        loaded = env.packages.get("scikit-learn", "")
        made_under = made.get("scikit-learn", self.cal.default_packages.get("scikit-learn", ""))
        if made_under != loaded:
            record = next(
                (
                    p
                    for p in self.cal.portability
                    if p.made == made_under and p.loaded == loaded and p.algorithm == made.get("algorithm")
                ),
                None,
            )
            if record is None:
                raise Unsupported(
                    "environments.build",
                    "sim",
                    f"what a {made.get('algorithm', 'model')} made under scikit-learn {made_under} does under "
                    f"{loaded} is not calibrated; run this on the local backend",
                )
            if record.error is not None:
                raise ModelScoreError(record.error)
        model = self.tracking.load_model(model_name, version)
        return [float(v) for v in model.predict_proba(rows)[:, 1]]

    def get(self, key: str) -> EnvironmentInfo:
        if key == DEFAULT_KEY:
            return self.default()
        found = self.built.get(key)
        if found is None:
            raise KeyError(f"environment {key!r} has not been built")
        return found

    def for_serving(self, env: EnvironmentInfo) -> EnvironmentInfo:
        if env.key == DEFAULT_KEY:
            return env
        return self.build([*env.requirements, *SERVER_REQUIREMENTS])


def _version_key(v: str) -> tuple[int, Version | str]:
    try:
        return (1, Version(v))
    except InvalidVersion:
        return (0, v)


__all__ = ["SimEnvironments"]
