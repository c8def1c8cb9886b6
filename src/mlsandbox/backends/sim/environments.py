"""Named Python environments of a ``sim`` sandbox (:class:`SimEnvironments`): resolved, not installed.

Requirements are parsed as on local (PEP 508 names and version specifiers only); each distribution is
resolved to the default environment's version when it satisfies the specifier, else to the newest
version the calibration knows that does; requirements nothing satisfies fail with the resolver's message.
A build is charged the calibrated build time. The key is a content address of the normalised
requirements, as on local. Jobs, flow runs and replicas in a named environment behave as in the default
one: the surrogate does not model library versions, so an environment that would put another version of
a library the workloads use (scikit-learn, numpy, pandas, scipy) in place of the default's is refused
with :class:`~mlsandbox.errors.Unsupported` (``environments.build``) rather than faked.
"""

from __future__ import annotations

import hashlib
import json

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from mlsandbox.backends.protocols import DEFAULT_KEY, EnvironmentBuildError, EnvironmentInfo, Unsupported
from mlsandbox.backends.sim.world import SimWorld

SERVER_REQUIREMENTS = ("fastapi", "uvicorn", "prometheus-client", "orjson", "mlflow")
MODELLED = ("scikit-learn", "numpy", "pandas", "scipy")
"""Libraries whose version changes what a workload does (a named environment may not change them here)."""
"""What the model server adds to an environment (``for_serving``)."""


def normalise(requirements: list[str]) -> list[str]:
    out = []
    for text in requirements:
        if text.strip().startswith("-") or "://" in text or "@" in text:
            raise ValueError(f"requirement {text!r}: only names with version specifiers are allowed")
        try:
            req = Requirement(text)
        except InvalidRequirement as e:
            raise ValueError(f"invalid requirement {text!r}: {e}") from None
        out.append(str(req))
    return sorted(set(out), key=str.lower)


class SimEnvironments:
    """See the module docstring (:class:`~mlsandbox.backends.protocols.Environments`)."""

    def __init__(self, world: SimWorld) -> None:
        self.world = world
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
            if name in MODELLED:
                raise Unsupported(
                    "environments.build",
                    "sim",
                    f"{text} in place of the default's {req.name} {default}: the simulator does not model "
                    "library versions (a model saved under one release and loaded under another); run this on "
                    "the local backend",
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
