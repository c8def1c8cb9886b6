"""Production traffic through the episode's serving on the runtime's clock: Poisson arrivals at the
scenario's rate (spikes included), outcomes as clients see them, labels after their delay, and a stream
that stops with its ticker. On a virtual clock (no thread) and, briefly, on the real one (a pool)."""

from __future__ import annotations

import time

import orjson
import pandas as pd
import pytest
from serving_fakes import InMemoryServing, ManualClock  # tests/unit is on sys.path

from mlsandbox.backends.common.clock import RealClock
from mlsandbox.backends.protocols.serving import DeploymentSpec, Machine
from mlsandbox.scenario.serving import Spike, Traffic
from mlsandbox.world.serving.traffic import ID_COLUMN, Population, TrafficGenerator

MACHINE = Machine(name="cpu-small", cpus=1.0, memory_mb=2048, credits_per_second=0.05)


def population(n: int = 100, phases: int = 2) -> Population:
    ids = [[f"p{b}-{i}" for i in range(n)] for b in range(phases)]
    flat = [i for phase in ids for i in phase]
    features = pd.DataFrame({ID_COLUMN: flat, "x": [float(k) for k in range(len(flat))]})
    labels = {i: 1 if i.endswith(("0", "2", "4")) else 0 for i in flat}
    return Population(features, labels, ids, [features.assign(label=[labels[i] for i in flat])])


def serving() -> InMemoryServing:
    s = InMemoryServing()
    s.deploy(
        DeploymentSpec(
            deployment="churn",
            model="churn",
            registry_name="ep.churn",
            version="1",
            replicas=1,
            machine=MACHINE,
        )
    )
    return s


def test_arrivals_follow_the_rate_and_clients_see_the_answers() -> None:
    clock, s = ManualClock(), serving()
    traffic = Traffic(rate_rps=5.0, label_delay_s=5.0, phase_s=30.0, phases=2, population_per_phase=100)
    tg = TrafficGenerator(traffic, population(), s, "churn", seed=1, clock=clock)
    tg.start()
    tg.start()  # idempotent
    assert clock.tickers() == 1 and tg.running
    clock.advance(60.0)
    assert 300 - 70 <= tg.log.sent <= 300 + 70  # Poisson(300): four standard deviations
    outcomes = tg.log.window(0.0, clock.time())
    assert len(outcomes) == tg.log.sent and tg.log.dropped == 0
    assert all(o.status == 200 and o.predictions == [1] for o in outcomes)
    assert all(o.latency_s == 0.0 for o in outcomes)  # a virtual clock does not move in a request
    # Phase 1 from 30 s: its entities only.
    late = [o for o in outcomes if o.t - tg.t0 >= 30.0]  # type: ignore[operator]
    assert late and all(i.startswith("p1-") for o in late for i in o.ids)
    # Labels arrive 5 s after the prediction: none for the last 5 s yet.
    pairs = tg.labelled(clock.time() - 10.0, clock.time())
    expected = sum(1 for o in outcomes if clock.time() - 15.0 < o.t <= clock.time() - 5.0)
    assert len(pairs) == expected > 0
    frame = tg.labelled_frame(clock.time(), "label")
    assert set(frame.columns) == {"x", "label"} and len(frame) > 0

    tg.stop()
    assert not tg.running and clock.tickers() == 0
    sent = tg.log.sent
    clock.advance(10.0)
    assert tg.log.sent == sent


def test_a_spike_multiplies_the_rate() -> None:
    clock, s = ManualClock(), serving()
    traffic = Traffic(
        rate_rps=4.0, spikes=[Spike(at_s=20, duration_s=20, multiplier=8)], population_per_phase=50
    )
    tg = TrafficGenerator(traffic, population(), s, "churn", seed=2, clock=clock)
    tg.start()
    clock.advance(60.0)
    t0 = tg.t0
    assert t0 is not None
    before = len(tg.log.window(t0, t0 + 20.0))
    during = len(tg.log.window(t0 + 20.0, t0 + 40.0))
    assert 80 - 40 <= before <= 80 + 40 and 640 - 110 <= during <= 640 + 110


def test_requests_to_a_deployment_that_does_not_exist_fail_as_clients_see_it() -> None:
    clock = ManualClock()
    tg = TrafficGenerator(
        Traffic(rate_rps=10.0, population_per_phase=50), population(), InMemoryServing(), "churn", 3, clock
    )
    tg.start()
    clock.advance(5.0)
    outcomes = tg.log.window(0.0, clock.time())
    assert outcomes and all(o.status == 0 and o.predictions is None for o in outcomes)


def test_instances_carry_the_features_of_the_entities() -> None:
    clock, s = ManualClock(), serving()
    seen: list[dict[str, object]] = []

    def answer(deployment: str, body: bytes) -> tuple[int, bytes, float]:
        seen.append(orjson.loads(body))
        return 503, b'{"detail": "down"}', 0.001

    s.answer = answer
    traffic = Traffic(rate_rps=10.0, by_entity=False, rows_per_request=3, population_per_phase=50)
    tg = TrafficGenerator(traffic, population(), s, "churn", seed=4, clock=clock)
    tg.start()
    clock.advance(2.0)
    assert seen and all(len(b["instances"]) == 3 for b in seen)  # type: ignore[arg-type]
    assert all(set(row) == {"x"} for b in seen for row in b["instances"])  # type: ignore[attr-defined]
    assert all(o.status == 503 for o in tg.log.window(0.0, clock.time()))


def test_on_the_real_clock_requests_run_on_a_pool_and_stop_waits_for_them() -> None:
    s = serving()
    tg = TrafficGenerator(
        Traffic(rate_rps=50.0, population_per_phase=50), population(), s, "churn", 5, RealClock()
    )
    tg.start()
    time.sleep(1.0)
    tg.stop()
    sent = tg.log.sent
    assert sent > 10
    time.sleep(0.2)
    assert tg.log.sent == sent and len(tg.log.window(0.0, time.time())) == sent
    with pytest.raises(RuntimeError):  # the pool is shut down with the stream
        tg._pool.submit(print)  # type: ignore[union-attr]


def test_the_monitor_works_out_the_clients_figures_only_when_asked_and_alike() -> None:
    from mlsandbox.scenario.serving import AlertRule, Serving
    from mlsandbox.world.episode import ServingRecord
    from mlsandbox.world.serving.monitoring import Monitor

    clock, s = ManualClock(), serving()
    pop = population(n=200)
    traffic = Traffic(rate_rps=20.0, label_delay_s=2.0, phase_s=30.0, phases=2, population_per_phase=200)
    tg = TrafficGenerator(traffic, pop, s, "churn", seed=5, clock=clock)
    reference = pop.features[pop.features[ID_COLUMN].str.startswith("p0-")].drop(columns=[ID_COLUMN])
    spec = Serving(dataset="d", traffic=traffic, alerts=[AlertRule(name="x", metric="rps", threshold=1)])
    mon = Monitor(spec, s, ServingRecord(), clock, production="churn", traffic=tg, reference=reference)
    tg.start()
    clock.advance(60.0)
    now = clock.time()
    full = mon.stats("churn", 30.0, now)
    assert full["feature_drift_psi"] is not None and full["feature_drift_psi"] > 0.2  # phase 1's x drifted
    assert full["live_accuracy"] is not None and full["client_rps"] is not None
    # one metric asked: the others of the clients' view are not worked out, the one asked is the same
    for name in ("feature_drift_psi", "live_accuracy", "client_rps", "client_latency_p99_ms"):
        only = mon.stats("churn", 30.0, now, metrics=(name,))
        assert only[name] == full[name]
        assert all(only[m] is None for m in ("feature_drift_psi", "live_accuracy") if m != name)
    assert mon.stats("churn", 30.0, now, metrics=("rps",))["client_rps"] is None
    # the rows served, looked up by id as a frame indexed by id would give them (repeats and order kept)
    ids = ["p1-3", "p0-7", "p1-3"]
    assert pop.rows(ids).equals(pop.features.set_index(ID_COLUMN).loc[ids])
    with pytest.raises(KeyError):
        pop.rows(["nobody"])
