"""A module-level OpenEnv app for ``uvicorn mlsandbox.integrations.openenv.app:app`` (and ``openenv.yaml``),
configured from the environment:

==================================  ==========================================  ======================
variable                            meaning                                     default
==================================  ==========================================  ======================
``MLSANDBOX_OPENENV_SCENARIO``      the scenario of a reset that names none     ``tabular-quality-basic``
``MLSANDBOX_BACKEND``               ``local``, ``kube`` or ``sim``              ``local``
``MLSANDBOX_NAME``                  the sandbox                                 ``default``
``MLSANDBOX_OPENENV_START``         ``1``: start a sandbox if none runs         ``0``
``MLSANDBOX_OPENENV_MAX_SESSIONS``  concurrent WebSocket sessions               ``8``
``MLSANDBOX_OPENENV_ALLOW_RESTART`` ``1``: sessions may restart shared services ``0``
==================================  ==========================================  ======================
"""

from __future__ import annotations

import os

from mlsandbox.integrations.openenv.server import DEFAULT_MAX_SESSIONS, create_openenv_app


def _flag(name: str) -> bool:
    return os.environ.get(name, "0").strip().lower() in ("1", "true", "yes")


app = create_openenv_app(
    scenario=os.environ.get("MLSANDBOX_OPENENV_SCENARIO", "tabular-quality-basic"),
    backend=os.environ.get("MLSANDBOX_BACKEND", "local"),
    sandbox=os.environ.get("MLSANDBOX_NAME") or None,
    start_sandbox=_flag("MLSANDBOX_OPENENV_START"),
    max_concurrent_envs=int(os.environ.get("MLSANDBOX_OPENENV_MAX_SESSIONS", DEFAULT_MAX_SESSIONS)),
    allow_restart=_flag("MLSANDBOX_OPENENV_ALLOW_RESTART"),
)
