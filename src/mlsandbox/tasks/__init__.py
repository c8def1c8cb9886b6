"""Kinds of ML work (the second seam): one :class:`~mlsandbox.tasks.kind.TaskKind` declaration per kind,
found through :mod:`mlsandbox.tasks.registry` (built-ins by name, plug-ins by the ``mlsandbox.kinds``
entry-point group). See :mod:`mlsandbox.tasks.kind` for what a kind declares."""

from mlsandbox.tasks.kind import Generated, Metric, Policy, Serving, TaskKind

__all__ = ["Generated", "Metric", "Policy", "Serving", "TaskKind"]
