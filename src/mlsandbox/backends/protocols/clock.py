"""Time as the world sees it: the wall clock on local and kube, a virtual clock on sim.

Everything in the world that reads the time or waits (the ``wait`` action, a job's deadline, production
traffic, the monitor's scrapes, timed faults, charges per second) goes through the runtime's clock, and
everything periodic is a ticker of that clock rather than a thread of its own. On a real clock a ticker is
a daemon thread; on a virtual clock time moves only in :meth:`Clock.sleep` (and whatever the backend
charges a step), and the tickers due in that interval run, in time order, inside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Ticker(Protocol):
    """Periodic or one-shot work scheduled on a clock."""

    def cancel(self) -> None:
        """Stop it (idempotent); a run in progress finishes."""
        ...


class Clock(Protocol):
    @property
    def virtual(self) -> bool:
        """True when time moves only when the world advances it (no thread runs on its own)."""
        ...

    def time(self) -> float:
        """Seconds since the epoch (a virtual clock starts at a fixed epoch, so runs are reproducible)."""
        ...

    def monotonic(self) -> float:
        """Seconds that never go back, for intervals and deadlines."""
        ...

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass (a virtual clock advances and runs the tickers due meanwhile)."""
        ...

    def every(self, interval_s: float, fn: Callable[[], None], *, name: str) -> Ticker:
        """Call ``fn`` every ``interval_s`` seconds until cancelled; an exception in ``fn`` is logged and
        the ticker goes on."""
        ...

    def after(self, delay_s: float, fn: Callable[[], None], *, name: str) -> Ticker:
        """Call ``fn`` once, ``delay_s`` seconds from now, unless cancelled first."""
        ...
