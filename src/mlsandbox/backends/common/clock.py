"""The wall clock of the backends that run real services (local, kube): :class:`RealClock`.

Time is the system's (``time.time``, ``time.monotonic``, ``time.sleep``); each ticker is a daemon thread
that waits on an event, so cancelling it wakes it at once. An exception in a ticker's function is logged
and the ticker goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class ThreadTicker:
    """Periodic (``interval_s``) or one-shot (``once``) work on a daemon thread of its own."""

    def __init__(self, delay_s: float, fn: Callable[[], None], *, name: str, once: bool) -> None:
        if delay_s < 0:
            raise ValueError(f"ticker {name!r}: a delay cannot be negative ({delay_s})")
        if not once and delay_s == 0:
            raise ValueError(f"ticker {name!r}: a periodic interval must be positive")
        self.name = name
        self._delay = float(delay_s)
        self._fn = fn
        self._once = once
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ticker:{name}", daemon=True)
        self._thread.start()

    @property
    def cancelled(self) -> bool:
        return self._stop.is_set()

    def _run(self) -> None:
        due = time.monotonic() + self._delay
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            try:
                self._fn()
            except Exception:  # a ticker never dies of its work
                log.exception("ticker %s failed", self.name)
            if self._once:
                return
            due += self._delay
            now = time.monotonic()
            if due < now:  # a run longer than the interval: the next one starts now, none is made up
                due = now

    def cancel(self) -> None:
        """Stop the ticker and wait for a run in progress to finish (not when called from the run
        itself). Idempotent."""
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def __repr__(self) -> str:
        kind = "after" if self._once else "every"
        return f"ThreadTicker({self.name!r}, {kind} {self._delay:g} s, cancelled={self.cancelled})"


class RealClock:
    """The system's clock: see the module docstring and :class:`~mlsandbox.backends.protocols.Clock`."""

    @property
    def virtual(self) -> bool:
        return False

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def every(self, interval_s: float, fn: Callable[[], None], *, name: str) -> ThreadTicker:
        """Call ``fn`` every ``interval_s`` seconds (the first call one interval from now)."""
        return ThreadTicker(interval_s, fn, name=name, once=False)

    def after(self, delay_s: float, fn: Callable[[], None], *, name: str) -> ThreadTicker:
        return ThreadTicker(delay_s, fn, name=name, once=True)

    def __repr__(self) -> str:
        return "RealClock()"


__all__ = ["RealClock", "ThreadTicker"]
