"""The ``sim`` backend: the whole declared Runtime in one process, in memory, on a virtual clock, its
jobs, serving and flows driven by a surrogate calibrated on real runs of the ``local`` backend.

``BACKEND_TYPE`` is what the ``mlsandbox.backends`` entry point names (``sim``), with its typed config
:class:`~mlsandbox.backends.sim.backend.SimConfig`.
"""

from __future__ import annotations

from mlsandbox.backends.protocols import BackendType
from mlsandbox.backends.sim.backend import SimBackend, SimConfig, SimRuntime, create

BACKEND_TYPE = BackendType(
    name="sim",
    description=(
        "in-process simulation: memory, a virtual clock and a surrogate calibrated on real local runs "
        "(no services, processes or sockets)"
    ),
    config=SimConfig,
    create=create,
    in_process=True,
)

__all__ = ["BACKEND_TYPE", "SimBackend", "SimConfig", "SimRuntime"]
