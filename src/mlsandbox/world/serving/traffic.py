"""Production traffic: a population drawn from the scenario's data distribution, and an open-loop stream.

:func:`make_population` draws, per drift phase, a clean population of entities from the dataset's spec
with the traffic's drifts applied at that phase's intensity (:func:`mlsandbox.data.drift.batch_spec`):
their features (what the feature service holds) and their true labels (hidden). :class:`TrafficGenerator`
sends requests to a deployment at ``rate(t)`` (Poisson arrivals: base rate, daily pattern, spikes),
choosing entities of the current phase; it records what clients see (latency, status) and the
predictions, whose true labels arrive ``label_delay_s`` later (live accuracy).

The stream is a ticker of the runtime's clock (every :data:`TICK_S`): each tick sends the arrivals due
since the last one through :meth:`~mlsandbox.backends.protocols.serving.EpisodeServing.request`. On a
real clock the requests run on a pool of ``concurrency`` threads (an open loop: a slow deployment builds
a backlog, and clients give up past four times the concurrency); on a virtual clock they run in the tick.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pandas as pd

from mlsandbox.backends.protocols.clock import Clock, Ticker
from mlsandbox.backends.protocols.serving import EpisodeServing, ServingError
from mlsandbox.data.drift import DriftingDataset, batch_spec
from mlsandbox.data.spec import TabularDataset
from mlsandbox.scenario.serving import Traffic
from mlsandbox.tasks.registry import kind_of

ID_COLUMN = "entity_id"
TICK_S = 0.02
"""How often the stream sends the arrivals that fell due (seconds of the runtime's clock)."""
_KEEP_S = 900.0


@dataclass
class Population:
    features: pd.DataFrame
    """``entity_id`` then the feature columns, every phase."""
    labels: dict[str, Any]
    phases: list[list[str]]
    """Entity ids of each phase."""
    holdouts: list[pd.DataFrame]
    """Each phase's rows with the target (features + label), for grading."""
    _by_id: pd.DataFrame | None = field(default=None, init=False, repr=False)
    _position: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    def rows(self, ids: list[str]) -> pd.DataFrame:
        """The feature rows of ``ids`` (repeats kept, in order), indexed by entity id (``KeyError`` for
        an id not in the population)."""
        if self._by_id is None:  # built once: the monitor asks for the window's rows at every tick
            self._by_id = self.features.set_index(ID_COLUMN)
            self._position = {str(i): k for k, i in enumerate(self._by_id.index)}
        return self._by_id.iloc[[self._position[str(i)] for i in ids]]


def make_population(spec: TabularDataset, traffic: Traffic, seed: int) -> Population:
    drifting = DriftingDataset(
        base=spec,
        batches=max(2, traffic.phases),
        batch_rows=50,
        time_column=None,
        drifts=list(traffic.drift),
    )
    frames: list[pd.DataFrame] = []
    labels: dict[str, Any] = {}
    phases: list[list[str]] = []
    holdouts: list[pd.DataFrame] = []
    for b in range(traffic.phases):
        tab, _ = batch_spec(drifting, b)
        tab = tab.model_copy(update={"rows": 50, "holdout_rows": traffic.population_per_phase})
        gen = kind_of(tab).generate(tab, (seed * 7919 + 104729 * (b + 1)) % (2**31))
        hold = gen.holdout.reset_index(drop=True)
        ids = [f"p{b}-{i}" for i in range(len(hold))]
        feats = hold.drop(columns=[spec.target])
        feats.insert(0, ID_COLUMN, ids)
        frames.append(feats)
        labels.update(zip(ids, hold[spec.target].tolist(), strict=True))
        phases.append(ids)
        holdouts.append(hold)
    return Population(pd.concat(frames, ignore_index=True), labels, phases, holdouts)


@dataclass
class Outcome:
    t: float
    latency_s: float
    status: int
    """HTTP status; 0 when no answer came (no deployment, refused, timed out)."""
    ids: list[str]
    predictions: list[Any] | None


@dataclass
class TrafficLog:
    """What production clients saw (thread safe)."""

    outcomes: deque[Outcome] = field(default_factory=deque)
    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: int = 0
    dropped: int = 0

    def add(self, o: Outcome) -> None:
        with self.lock:
            self.outcomes.append(o)
            while self.outcomes and self.outcomes[0].t < o.t - _KEEP_S:
                self.outcomes.popleft()

    def window(self, start: float, end: float) -> list[Outcome]:
        with self.lock:
            return [o for o in self.outcomes if start < o.t <= end]


def rate_at(traffic: Traffic, t: float) -> float:
    rate = traffic.rate_rps
    if traffic.day_length_s > 0 and traffic.daily_amplitude > 0:
        rate *= 1.0 + traffic.daily_amplitude * math.sin(2 * math.pi * t / traffic.day_length_s)
    for s in traffic.spikes:
        if s.at_s <= t < s.at_s + s.duration_s:
            rate *= s.multiplier
    return max(rate, 1e-3)


class TrafficGenerator:
    """Sends the stream to deployment ``target`` on a ticker of ``clock`` until :meth:`stop`."""

    def __init__(
        self,
        traffic: Traffic,
        population: Population,
        serving: EpisodeServing,
        target: str,
        seed: int,
        clock: Clock,
    ) -> None:
        self.traffic = traffic
        self.population = population
        self.serving = serving
        self.target = target
        self.clock = clock
        self.rng = np.random.default_rng(seed)
        self.log = TrafficLog()
        self.t0: float | None = None
        self._ticker: Ticker | None = None
        self._stopped = False
        self._next: float = 0.0
        self._tick_lock = threading.Lock()
        self._pool = (
            None
            if clock.virtual
            else ThreadPoolExecutor(max_workers=traffic.concurrency, thread_name_prefix="traffic")
        )
        self._busy = 0
        self._busy_lock = threading.Lock()
        feats = population.features.set_index(ID_COLUMN)
        self._rows = {
            i: {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for i, r in zip(feats.index, feats.to_dict("records"), strict=True)
        }

    @property
    def running(self) -> bool:
        return self._ticker is not None and not self._stopped

    def elapsed(self) -> float:
        return 0.0 if self.t0 is None else self.clock.time() - self.t0

    def phase(self, t: float | None = None) -> int:
        t = self.elapsed() if t is None else t
        return min(int(t // self.traffic.phase_s), len(self.population.phases) - 1)

    def start(self) -> None:
        """Start the stream (idempotent): the first request after one inter-arrival time."""
        if self._ticker is not None or self._stopped:
            return
        self.t0 = self.clock.time()
        self._next = self.clock.monotonic() + self._gap()
        self._ticker = self.clock.every(TICK_S, self._tick, name="traffic")

    def stop(self) -> None:
        """Stop sending and wait for the requests in flight (idempotent)."""
        self._stopped = True
        if self._ticker is not None:
            self._ticker.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def _gap(self) -> float:
        """The time to the next arrival at the current rate (Poisson arrivals)."""
        return float(self.rng.exponential(1.0 / rate_at(self.traffic, self.elapsed())))

    def _tick(self) -> None:
        """Send every arrival due by now (a late tick sends those it missed at once)."""
        with self._tick_lock:
            now = self.clock.monotonic()
            while self._next <= now and not self._stopped:
                self._next += self._gap()
                ids = self.population.phases[self.phase()]
                picks = [ids[int(k)] for k in self.rng.integers(0, len(ids), self.traffic.rows_per_request)]
                with self._busy_lock:
                    if self._busy >= self.traffic.concurrency * 4:
                        self.log.dropped += 1  # clients give up: the backlog is too long
                        self.log.add(Outcome(self.clock.time(), 0.0, 0, picks, None))
                        continue
                    self._busy += 1
                self.log.sent += 1
                if self._pool is None:
                    self._send(picks)
                else:
                    try:
                        self._pool.submit(self._send, picks)
                    except RuntimeError:  # stopped meanwhile
                        with self._busy_lock:
                            self._busy -= 1
                        return

    def _body(self, ids: list[str]) -> bytes:
        if self.traffic.by_entity:
            return orjson.dumps({"entity_ids": ids})
        return orjson.dumps({"instances": [self._rows[i] for i in ids]})

    def _send(self, ids: list[str]) -> None:
        sent = self.clock.time()
        t0 = self.clock.monotonic()
        status, preds, elapsed = 0, None, None
        try:
            resp = self.serving.request(
                self.target, "/predict", self._body(ids), timeout_s=self.traffic.timeout_s
            )
            status, elapsed = resp.status, resp.elapsed_s
            if status == 200:
                preds = orjson.loads(resp.body).get("predictions")
        except ServingError:
            status = 0
        except Exception:
            status = 0
        finally:
            with self._busy_lock:
                self._busy -= 1
        latency = self.clock.monotonic() - t0 if elapsed is None else elapsed
        self.log.add(Outcome(sent, latency, status, ids, preds))

    # ------------------------------------------------------------------------------------- figures

    def labelled(self, start: float, end: float) -> list[tuple[Any, Any]]:
        """(prediction, true label) of predictions whose label arrived in (start, end]."""
        d = self.traffic.label_delay_s
        out: list[tuple[Any, Any]] = []
        for o in self.log.window(start - d, end - d):
            if o.predictions is None:
                continue
            out.extend(zip(o.predictions, (self.population.labels[i] for i in o.ids), strict=False))
        return out

    def labelled_frame(self, end: float, target: str) -> pd.DataFrame:
        """Features and true labels of every entity served whose label has arrived by ``end``."""
        seen: dict[str, None] = {}
        for o in self.log.window(0.0, end - self.traffic.label_delay_s):
            if o.predictions is not None:
                seen.update(dict.fromkeys(o.ids))
        feats = self.population.rows(list(seen))
        feats = feats.reset_index(drop=True)
        return feats.assign(**{target: [self.population.labels[i] for i in seen]})

    def served_features(self, start: float, end: float) -> pd.DataFrame:
        ids = [i for o in self.log.window(start, end) if o.status == 200 for i in o.ids]
        return self.population.rows(ids) if ids else pd.DataFrame()
