"""What a benchmark ran on (the machine block of every ``.bench/*.json``): see :mod:`mlsandbox.machine`."""

from mlsandbox.machine import cpu_model, describe, reference_ms, summary

__all__ = ["cpu_model", "describe", "reference_ms", "summary"]
