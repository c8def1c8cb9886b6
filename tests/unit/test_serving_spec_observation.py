"""How much production traffic the SLO of a deployment_slo goal must have been watched for."""

from __future__ import annotations

from mlsandbox.scenario import load_builtin
from mlsandbox.scenario.serving import SLO, Serving, Spike, Traffic


def test_one_slo_window_without_spikes_and_through_the_last_spike_with_them() -> None:
    plain = Serving(dataset="d", slo=SLO(window_s=12))
    assert plain.required_observation_s() == 12
    spiky = Serving(dataset="d", traffic=Traffic(spikes=[Spike(at_s=25, duration_s=60, multiplier=8)]))
    assert spiky.required_observation_s() == 85
    assert Serving(dataset="d", traffic=None).required_observation_s() == 0


def test_the_traffic_spike_scenario_must_be_watched_through_its_burst() -> None:
    serving = load_builtin("serving-traffic-spike").serving
    assert serving is not None and serving.required_observation_s() == 85
