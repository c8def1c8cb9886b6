"""The virtual clock of the ``sim`` backend: :class:`VirtualClock`.

Time moves only when the world lets it: :meth:`VirtualClock.sleep` advances it and runs the tickers due
in that interval, each at its own time and in time order (ties in the order they were scheduled); the
backend's operations :meth:`VirtualClock.charge` the time they take, which moves the clock without
running tickers (a ticker that fell due meanwhile runs at the next ``sleep``, at the time the clock has
reached). No thread runs on its own, so a run is a pure function of its inputs.

A ticker that raises is logged and goes on (as on the real clock). A ticker scheduled from inside a
ticker's run is honoured in the same ``sleep`` when it falls due within it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

EPOCH = 1_798_761_600.0
"""Where every virtual clock starts (2027-01-01T00:00:00Z): runs are reproducible and their dates
plausible."""


class VirtualTicker:
    """Periodic (``interval``) or one-shot work on a :class:`VirtualClock`."""

    __slots__ = ("cancelled", "due", "fn", "interval", "name")

    def __init__(self, due: float, interval: float | None, fn: Callable[[], None], name: str) -> None:
        self.due = due
        self.interval = interval
        self.fn = fn
        self.name = name
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __repr__(self) -> str:
        kind = f"every {self.interval:g} s" if self.interval is not None else "once"
        return f"VirtualTicker({self.name!r}, {kind}, due={self.due:.3f}, cancelled={self.cancelled})"


class VirtualClock:
    """See the module docstring and :class:`~mlsandbox.backends.protocols.Clock`."""

    def __init__(self, epoch: float = EPOCH) -> None:
        self.epoch = epoch
        self.now = 0.0
        """Seconds since the clock started (what :meth:`monotonic` returns)."""
        self._heap: list[tuple[float, int, VirtualTicker]] = []
        self._seq = itertools.count()
        self._running = False

    @property
    def virtual(self) -> bool:
        return True

    def time(self) -> float:
        return self.epoch + self.now

    def monotonic(self) -> float:
        return self.now

    @property
    def in_ticker(self) -> bool:
        """True while a ticker runs (inside :meth:`sleep`)."""
        return self._running

    def charge(self, seconds: float) -> None:
        """Time an operation took: the clock moves on, no ticker runs."""
        if seconds > 0:
            self.now += seconds

    def sleep(self, seconds: float) -> None:
        """Advance by ``seconds``, running every ticker due meanwhile at its time. A sleep from inside a
        ticker's run only moves the clock (tickers never nest)."""
        end = self.now + max(0.0, seconds)
        if self._running:
            self.now = end
            return
        self._running = True
        try:
            heap = self._heap
            while heap and heap[0][0] <= end:
                due, _, ticker = heapq.heappop(heap)
                if ticker.cancelled:
                    continue
                if due > self.now:
                    self.now = due
                try:
                    ticker.fn()
                except Exception:  # a ticker never dies of its work
                    log.exception("ticker %s failed", ticker.name)
                if ticker.interval is not None and not ticker.cancelled:
                    nxt = due + ticker.interval
                    if nxt <= self.now:  # it ran late: the next run one interval from now, none made up
                        nxt = self.now + ticker.interval
                    ticker.due = nxt
                    heapq.heappush(heap, (ticker.due, next(self._seq), ticker))
            if end > self.now:
                self.now = end
        finally:
            self._running = False

    def advance_to(self, t: float) -> None:
        """Sleep until monotonic time ``t`` (nothing when it has passed)."""
        if t > self.now:
            self.sleep(t - self.now)

    def every(self, interval_s: float, fn: Callable[[], None], *, name: str) -> VirtualTicker:
        """Call ``fn`` every ``interval_s`` seconds (the first call one interval from now)."""
        if interval_s <= 0:
            raise ValueError(f"ticker {name!r}: a periodic interval must be positive")
        ticker = VirtualTicker(self.now + interval_s, interval_s, fn, name)
        heapq.heappush(self._heap, (ticker.due, next(self._seq), ticker))
        return ticker

    def after(self, delay_s: float, fn: Callable[[], None], *, name: str) -> VirtualTicker:
        if delay_s < 0:
            raise ValueError(f"ticker {name!r}: a delay cannot be negative ({delay_s})")
        ticker = VirtualTicker(self.now + delay_s, None, fn, name)
        heapq.heappush(self._heap, (ticker.due, next(self._seq), ticker))
        return ticker

    def pending(self) -> int:
        """Tickers scheduled and not cancelled."""
        return sum(1 for _, _, t in self._heap if not t.cancelled)

    def next_due(self) -> float | None:
        """Monotonic time of the next ticker due (None when none is scheduled)."""
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def __repr__(self) -> str:
        return f"VirtualClock(t={self.now:.3f}, tickers={self.pending()})"


__all__ = ["EPOCH", "VirtualClock", "VirtualTicker"]
