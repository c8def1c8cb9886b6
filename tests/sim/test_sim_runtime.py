"""The sim runtime's capabilities on their own: the virtual clock, the object store, tracking, jobs on the
surrogate, fault control's symptoms, serving's queue and scrapes, the calibration loader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.helpers import job_until_done as _until_done

from mlsandbox.backends import get_backend
from mlsandbox.backends.protocols import HttpFault, JobSpec, NoSuchTarget
from mlsandbox.backends.protocols.serving import DeploymentSpec, Machine, ServingError
from mlsandbox.backends.sim.clock import VirtualClock
from mlsandbox.calibration.shipped import default_path, load_calibration
from mlsandbox.data.formats import to_bytes
from mlsandbox.data.tabular import generate_tabular
from mlsandbox.errors import BackendError, ConfigError, Unsupported
from mlsandbox.scenario import load_builtin
from mlsandbox.world.serving.monitoring import parse_scrape


@pytest.fixture
def rt() -> Any:
    return get_backend("sim", "runtime-test").runtime()


def _dataset(rt: Any, bucket: str = "bk1") -> str:
    rt.object_store.create_bucket(bucket)
    spec = load_builtin("churn-clean-small").datasets[0]
    rt.object_store.put_object(
        bucket, "d.parquet", to_bytes(generate_tabular(spec, 5).train_table, "parquet")
    )
    return bucket


def _train(
    rt: Any,
    job_id: str,
    *,
    memory_mb: int = 1024,
    cpus: float = 1.0,
    timeout_s: float | None = None,
    algorithm: str = "gradient_boosting",
    hyperparams: dict[str, Any] | None = None,
) -> Any:
    experiment = rt.tracking.create_experiment(f"e-{job_id}")
    spec = JobSpec(
        job_id=job_id,
        workload="trainer",
        args=[
            "--bucket",
            "bk1",
            "--key",
            "d.parquet",
            "--target",
            "label",
            "--algorithm",
            algorithm,
            "--hyperparams",
            json.dumps(hyperparams or {}),
            "--experiment-id",
            experiment,
            "--run-name",
            job_id,
            "--seed",
            "1",
        ],
        cpus=cpus,
        memory_mb=memory_mb,
        labels={"episode": "t"},
        timeout_s=timeout_s,
    )
    return rt.jobs.submit(spec)


# ------------------------------------------------------------------------------------------------ clock


def test_the_virtual_clock_runs_tickers_in_time_order_inside_sleep_only() -> None:
    clock = VirtualClock()
    seen: list[tuple[str, float]] = []
    clock.every(2.0, lambda: seen.append(("every", clock.monotonic())), name="a")
    clock.after(3.0, lambda: seen.append(("after", clock.monotonic())), name="b")
    broken = clock.every(1.5, lambda: 1 / 0, name="broken")  # logged, goes on
    clock.charge(10.0)  # an operation's time: no ticker runs
    assert seen == [] and clock.monotonic() == 10.0
    clock.sleep(1.0)  # everything due by 11 s runs, late, at the clock's time, in due order
    assert [s[0] for s in seen] == ["every", "after"]
    broken.cancel()
    seen.clear()
    clock.sleep(4.0)
    assert seen == [("every", 12.0), ("every", 14.0)]  # one interval after its late run
    assert clock.time() - clock.monotonic() == clock.epoch


# ----------------------------------------------------------------------------------------- object store


def test_the_object_store_keeps_bytes_refuses_over_quota_and_fails_as_the_client_when_down(rt: Any) -> None:
    store, faults = rt.object_store, rt.faults
    store.create_bucket("bk1")
    store.put_object("bk1", "a.txt", b"x" * 100)
    assert store.get_object("bk1", "a.txt") == b"x" * 100
    with pytest.raises(KeyError, match="does not exist"):
        store.get_object("bk1", "nope")
    faults.set_bucket_quota("bk1", 150)
    with pytest.raises(BackendError, match="XMinioAdminBucketQuotaExceeded"):
        store.put_object("bk1", "b.txt", b"y" * 100)
    assert [o.key for o in store.list_objects("bk1")] == ["a.txt"]  # nothing written
    faults.set_bucket_quota("bk1", None)
    store.put_object("bk1", "b.txt", b"y" * 100)
    faults.services.kill("minio")
    with pytest.raises(BackendError, match="unreachable"):
        store.get_object("bk1", "a.txt")
    faults.services.restart("minio")
    faults.services.freeze("minio")
    t0 = rt.clock.monotonic()
    with pytest.raises(BackendError, match="Read timeout"):
        store.list_objects("bk1")
    assert rt.clock.monotonic() - t0 >= 60.0  # the client's read timeout, twice
    assert faults.recover_all() == ["minio thawed"]
    faults.network.add_toxic("minio", "slow", "latency", {"latency": 200, "jitter": 0})
    t0 = rt.clock.monotonic()
    store.get_object("bk1", "a.txt")
    assert rt.clock.monotonic() - t0 >= 0.2
    faults.network.set_enabled("minio", False)
    with pytest.raises(BackendError, match="Could not connect"):
        store.get_object("bk1", "a.txt")
    faults.network.reset()
    assert store.get_object("bk1", "a.txt") == b"x" * 100
    with pytest.raises(Unsupported) as refused:  # a Toxiproxy toxic no fault type uses: refused, not faked
        faults.network.add_toxic("minio", "x", "slicer", {})
    assert refused.value.capability == "fault:slicer" and refused.value.backend == "sim"


# ---------------------------------------------------------------------------------------------- tracking


def test_search_runs_uses_mlflows_filters_and_refuses_a_bad_one_with_its_message(rt: Any) -> None:
    _dataset(rt)
    _until_done(rt, _train(rt, "j1").job_id)
    _until_done(rt, _train(rt, "j2", algorithm="logistic_regression").job_id)
    experiment = rt.tracking.runs[next(iter(rt.tracking.runs))].experiment_id
    runs = rt.tracking.search_runs(experiment, "params.algorithm = 'gradient_boosting'")
    assert len(runs) == 1 and runs[0].status == "FINISHED" and runs[0].metrics["val_auc"] > 0.6
    with pytest.raises(ValueError, match="Invalid clause"):
        rt.tracking.search_runs(experiment, "params.algorithm = 'x' or metrics.val_auc > 0")
    with pytest.raises(KeyError, match="not found"):
        rt.tracking.get_run("0" * 32)


# -------------------------------------------------------------------------------------------------- jobs


def test_a_job_runs_on_the_clock_logs_like_the_trainer_and_registers_a_model_that_scores(rt: Any) -> None:
    _dataset(rt)
    status = _train(rt, "ok")
    assert status.state == "running"
    done = _until_done(rt, "ok")
    assert done.state == "succeeded" and done.exit_code == 0
    assert done.finished_at - done.started_at > 1.0 and done.cpu_seconds > 1.0  # calibrated overheads
    log = rt.jobs.logs("ok")
    assert (
        "reading s3://bk1/d.parquet" in log
        and "val_auc=" in log
        and log.splitlines()[-1].startswith("MLSANDBOX_RESULT ")
    )
    run_id = done.result["run_id"]
    mv = rt.tracking.register_model(run_id, "m")
    model = rt.tracking.load_model("m", mv.version)
    holdout = generate_tabular(load_builtin("churn-clean-small").datasets[0], 5).holdout
    proba = model.predict_proba(holdout.drop(columns=["label"]))
    assert proba.shape == (len(holdout), 2)


def test_memory_limits_timeouts_and_cancels_end_jobs_as_on_local(rt: Any) -> None:
    _dataset(rt)
    _train(rt, "tiny", memory_mb=64)
    oom = _until_done(rt, "tiny")
    assert oom.state == "failed" and oom.exit_code == 137
    assert (
        rt.jobs.logs("tiny").splitlines()[-1]
        == "[mlsandbox] killed: out of memory (OOMKilled, memory limit 64 MiB)"
    )
    _train(rt, "late", timeout_s=2.0)
    late = _until_done(rt, "late")
    assert late.state == "failed" and late.exit_code == 137
    assert "timed out after 2 s" in rt.jobs.logs("late")
    _train(rt, "cut")
    rt.clock.sleep(2.0)
    rt.faults.set_job_limits("cut", memory_mb=100)  # below what it uses now: killed at once
    cut = rt.jobs.get("cut")
    assert cut.state == "failed" and cut.exit_code == 137
    _train(rt, "stop")
    rt.clock.sleep(1.0)
    stopped = rt.jobs.cancel("stop")
    assert stopped.state == "cancelled" and stopped.exit_code == 143


def test_a_cpu_throttle_stretches_a_job_and_a_killed_tracker_fails_it_at_its_end(rt: Any) -> None:
    _dataset(rt)
    fast = _until_done(rt, _train(rt, "fast").job_id)
    _train(rt, "slow")
    rt.faults.set_job_limits("slow", cpus=0.1)
    slow = _until_done(rt, "slow", limit_s=3000)
    assert slow.state == "succeeded"
    slow_wall, fast_wall = slow.finished_at - slow.started_at, fast.finished_at - fast.started_at
    # At 0.1 CPU every phase takes at least its CPU-seconds x 10 (the calibrated wall-time draw of an
    # unthrottled job spreads by several seconds, so no fixed ratio to another job holds).
    assert slow.cpu_seconds > 0 and slow_wall >= 0.99 * slow.cpu_seconds / 0.1
    assert slow_wall > fast_wall + 5 * fast.cpu_seconds
    _train(rt, "orphan")
    for _ in range(600):  # until its run is open (the calibrated start-up takes seconds)
        if any(r.name == "orphan" for r in rt.tracking.runs.values()):
            break
        rt.clock.sleep(0.5)
        rt.jobs.get("orphan")
    rt.faults.services.kill("mlflow")
    orphan = _until_done(rt, "orphan")
    assert orphan.state == "failed" and "Connection refused" in rt.jobs.logs("orphan")
    rt.faults.services.restart("mlflow")
    run = next(r for r in rt.tracking.runs.values() if r.name == "orphan")
    assert run.status == "RUNNING"  # nobody could tell the tracker: as with MLflow


def test_a_wrong_endpoint_or_secret_in_the_config_fails_the_job_with_the_clients_error(rt: Any) -> None:
    _dataset(rt)
    store = rt.config
    store.open_scope("p-", store.job_config())
    store.set("p-s3_secret_access_key", "wrong")
    experiment = rt.tracking.create_experiment("cfg")
    spec = JobSpec(
        job_id="cfg",
        workload="trainer",
        args=[
            "--bucket",
            "bk1",
            "--key",
            "d.parquet",
            "--target",
            "label",
            "--algorithm",
            "logistic_regression",
            "--experiment-id",
            experiment,
            "--config-prefix",
            "p-",
        ],
    )
    rt.jobs.submit(spec)
    assert _until_done(rt, "cfg").state == "failed"
    assert "SignatureDoesNotMatch" in rt.jobs.logs("cfg")


# ---------------------------------------------------------------------------------------- fault control


def test_service_faults_show_the_symptoms_local_shows(rt: Any) -> None:
    services = rt.faults.services
    assert services.health("mlflow").healthy
    services.kill("mlflow")
    down = services.health("mlflow")
    assert not down.healthy and down.error == "ConnectError: [Errno 111] Connection refused"
    back = services.restart("mlflow")
    assert back.healthy and back.latency_ms and back.latency_ms > 1000
    services.freeze("prefect-worker")
    assert services.health("prefect-worker").error == "worker not online"
    services.thaw("prefect-worker")
    with pytest.raises(ValueError, match="unknown service"):
        services.kill("postgres-ish")
    with pytest.raises(NoSuchTarget):
        rt.faults.set_http_fault("nope", HttpFault(error_rate=1.0, status=503), episode_id="e")
    assert rt.faults.unavailable() == {}


# ---------------------------------------------------------------------------------------------- serving


def test_serving_queues_requests_and_its_scrapes_parse_as_the_model_servers(rt: Any) -> None:
    _dataset(rt)
    done = _until_done(rt, _train(rt, "srv").job_id)
    rt.tracking.register_model(done.result["run_id"], "ep.churn")
    serving = rt.serving.open("e1", {"episode": "e1"})
    machine = Machine(name="cpu-small", cpus=1.0, memory_mb=2048, credits_per_second=0.01)
    with pytest.raises(ServingError) as refused:
        serving.deploy(
            DeploymentSpec(
                deployment="churn",
                model="churn",
                registry_name="ep.churn",
                version="9",
                replicas=1,
                machine=machine,
            )
        )
    assert refused.value.code == "deploy_failed"
    view, created = serving.deploy(
        DeploymentSpec(
            deployment="churn",
            model="churn",
            registry_name="ep.churn",
            version="1",
            replicas=1,
            machine=machine,
        )
    )
    assert created and view.replicas_up == 1 and view.rollout == "complete"
    row = generate_tabular(load_builtin("churn-clean-small").datasets[0], 5).holdout.drop(columns=["label"])
    body = orjson.dumps({"instances": json.loads(row.head(1).to_json(orient="records"))})
    alone = serving.request("churn", "/predict", body, timeout_s=10.0)
    assert alone.status == 200 and alone.elapsed_s is not None, alone.body
    assert set(orjson.loads(alone.body)) == {"predictions", "probabilities", "model", "version"}
    burst: list[Any] = []  # five clients at the same moment (as production traffic sends them)
    rt.clock.after(
        1.0,
        lambda: burst.extend(serving.request("churn", "/predict", body, timeout_s=10.0) for _ in range(5)),
        name="burst",
    )
    rt.clock.sleep(2.0)
    waits = [r.elapsed_s for r in burst]
    assert all(r.status == 200 for r in burst)
    assert waits == sorted(waits) and waits[-1] > 3 * waits[0]  # each waits for the ones before it
    bad = serving.request("churn", "/predict", b'{"instances": [{"nope": 1}]}', timeout_s=10.0)
    assert bad.status == 422 and b"Field required" in bad.body
    ref = serving.replicas()["churn"][0]
    scraped = parse_scrape(serving.scrape(ref, timeout_s=1.0), "/predict")
    assert scraped.total == 7 and scraped.errors == 0
    assert serving.credits_per_second() == pytest.approx(0.01)
    serving.close()


# ------------------------------------------------------------------------------------------- calibration


def test_the_calibration_is_measured_and_a_broken_one_is_refused_with_the_field(tmp_path: Path) -> None:
    cal = load_calibration()
    assert not cal.meta.provisional and cal.meta.sweep["jobs"] > 0 and cal.meta.sweep["fits"] > 0
    doc = json.loads(default_path().read_text())
    doc["jobs"]["algorithms"]["mlp"]["auc"]["val_delta"]["coefficients"]["no_such_feature"] = 1.0
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="unknown feature 'no_such_feature'"):
        load_calibration(broken)
    doc = json.loads(default_path().read_text())
    doc["jobs"]["trainer"]["log"]["per_epoch"]["text"] = "epoch {epoch} {nonsense}"
    broken.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="unknown placeholder"):
        load_calibration(broken)
    with pytest.raises(ConfigError, match="invalid config for the sim backend"):
        get_backend("sim", "x", step_cost_s=-1)
