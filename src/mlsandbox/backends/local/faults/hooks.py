"""HTTP faults of a local sandbox: the fault hooks of its own HTTP services (model servers, the feature
service, an API data source).

Each such service reads a control file (:mod:`mlsandbox.workloads.fault_hook`); whoever starts it
registers the file under the name ``http:NAME`` targets use, for one episode or for all. An ``http:NAME``
fault resolves NAME through that registry, journals the file and writes it; recovery removes it.
"""

from __future__ import annotations

from pathlib import Path

from mlsandbox.backends.local.faults.journal import Journal, UndoHookFile
from mlsandbox.backends.protocols import HttpFault, NoSuchTarget
from mlsandbox.workloads import fault_hook


def _key(target: str, episode_id: str) -> str:
    return f"hook:{episode_id}:{target}"


class HttpHooks:
    """``set_http_fault`` / ``clear_http_fault`` of the local fault control."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def set(self, target: str, fault: HttpFault, *, episode_id: str) -> None:
        path = fault_hook.hook_file(target, scope=episode_id)
        if path is None:
            known = ", ".join(fault_hook.registered_hooks(scope=episode_id)) or "none"
            raise NoSuchTarget(
                f"no HTTP service {target!r} has registered a fault hook (registered: {known})"
            )
        self.journal.add(_key(target, episode_id), UndoHookFile(path=str(path)))
        fault_hook.write_fault(
            path, error_rate=fault.error_rate, status=fault.status, delay_ms=fault.delay_ms, seed=fault.seed
        )

    def clear(self, target: str, *, episode_id: str) -> None:
        """Remove the fault this control set (the file is found in the journal, also when the service
        has unregistered its hook since); a fault set by another mechanism is left alone."""
        key = _key(target, episode_id)
        entry = self.journal.get(key)
        if isinstance(entry, UndoHookFile):
            fault_hook.clear_fault(Path(entry.path))
        self.journal.remove(key)

    def active(self, target: str, *, episode_id: str) -> bool:
        """Whether the control file this control wrote is still there (a restart may have removed it)."""
        entry = self.journal.get(_key(target, episode_id))
        return isinstance(entry, UndoHookFile) and Path(entry.path).exists()
