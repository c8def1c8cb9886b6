"""The kube backend's manifest builders: training Jobs (and their status read back) and Chaos Mesh faults.

Every built manifest is validated with ``kubeconform -strict`` against the Kubernetes schemas of the pinned
version and the Chaos Mesh CRD schemas in chaos/schemas (offline; a missing tool fails with a hint to run
``make setup``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from pydantic import ValidationError
from tests.helpers import ENDPOINTS

from mlsandbox.backends.kube import schemas
from mlsandbox.backends.kube.faults import chaos_mesh as chaos
from mlsandbox.backends.kube.manifests import (
    OOM_EXIT,
    job_name,
    job_status,
    oom_killed,
    training_job,
)
from mlsandbox.backends.protocols import JobSpec
from mlsandbox.cli.kube import chaos_example_text
from mlsandbox.errors import MissingToolError
from mlsandbox.workloads.contract import endpoint_env, thread_env

TRAINER_ARGS = [
    "--bucket",
    "ep-1",
    "--key",
    "raw/customers.csv",
    "--target",
    "label",
    "--algorithm",
    "logistic_regression",
    "--hyperparams",
    '{"C": 0.5}',
    "--experiment-id",
    "1",
    "--seed",
    "7",
]


def validate(docs: list[dict[str, Any]]) -> schemas.Report:
    try:
        report = schemas.kubeconform(docs, crd_schema_dirs=[schemas.CHAOS_SCHEMA_DIR])
    except MissingToolError as exc:
        pytest.fail(str(exc))
    assert len(report.results) == len(docs), report.results
    return report


def spec(**overrides: Any) -> JobSpec:
    values: dict[str, Any] = {
        "job_id": "train-3",
        "workload": "trainer",
        "args": TRAINER_ARGS,
        "cpus": 1.5,
        "memory_mb": 768,
        "labels": {"mlsandbox.dev/episode": "ep-1"},
        "timeout_s": 120.5,
    }
    return JobSpec(**{**values, **overrides})


def env_of(job: dict[str, Any]) -> dict[str, Any]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


# ------------------------------------------------------------------------------------------------ jobs


def test_training_job_runs_the_same_command_as_the_local_backend() -> None:
    job = training_job(
        spec(), namespace="sbx-default-demo", image="mlsandbox/trainer:0.1.0", endpoints=ENDPOINTS
    )
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "mlsandbox.workloads.trainer", *TRAINER_ARGS]
    assert container["image"] == "mlsandbox/trainer:0.1.0"
    env = env_of(job)
    for name, value in {**endpoint_env(**ENDPOINTS.model_dump()), **thread_env(1.5)}.items():
        assert env[name] == value, name
    assert env["MLSANDBOX_JOB_ID"] == "train-3"


def test_training_job_keeps_gitpython_quiet_so_the_log_tail_is_the_jobs_own() -> None:
    job = training_job(spec(), namespace="ns", image="img:1", endpoints=ENDPOINTS)
    assert env_of(job)["GIT_PYTHON_REFRESH"] == "quiet"


def test_training_job_requests_equal_limits_and_no_retries() -> None:
    job = training_job(spec(), namespace="ns", image="img:1", endpoints=ENDPOINTS)
    resources = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"] == {"cpu": "1500m", "memory": "768Mi"}
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 121
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["metadata"]["namespace"] == "ns"
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "trainer"
    assert labels["mlsandbox.dev/episode"] == "ep-1"
    assert labels["mlsandbox.dev/job-id"] == "train-3"


def test_training_job_without_timeout_has_no_deadline_and_takes_s3_keys_from_a_secret() -> None:
    job = training_job(
        spec(timeout_s=None, env={"EXTRA": "1"}),
        namespace="ns",
        image="img:1",
        endpoints=ENDPOINTS,
        s3_secret="mls-minio",
    )
    assert "activeDeadlineSeconds" not in job["spec"]
    env = env_of(job)
    assert env["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "mls-minio", "key": "access-key"}}
    assert env["AWS_SECRET_ACCESS_KEY"] == {"secretKeyRef": {"name": "mls-minio", "key": "secret-key"}}
    assert env["EXTRA"] == "1"
    assert "secret-secret" not in yaml.safe_dump(job)


def test_job_names_follow_kubernetes_rules() -> None:
    assert job_name("train_3.retry") == "train-3-retry"
    with pytest.raises(ValueError, match="cannot name"):
        job_name("x" * 60)
    with pytest.raises(ValueError, match="not a valid Kubernetes label"):
        training_job(spec(labels={"bad key!": "v"}), namespace="ns", image="img:1", endpoints=ENDPOINTS)


def test_training_jobs_validate_strictly() -> None:
    jobs = [
        training_job(spec(), namespace="ns", image="img:1", endpoints=ENDPOINTS),
        training_job(
            spec(job_id="burn-1", workload="burn", args=["--mem-mb", "10"], timeout_s=None),
            namespace="ns",
            image="img:1",
            endpoints=ENDPOINTS,
            s3_secret="mls-minio",
        ),
    ]
    report = validate(jobs)
    assert not report.failures, report.describe()


def _job(status: dict[str, Any], suspend: bool = False) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "spec": {"suspend": suspend}, "status": status}


def _pod(terminated: dict[str, Any] | None) -> dict[str, Any]:
    state = {"terminated": terminated} if terminated else {"running": {}}
    return {"status": {"containerStatuses": [{"name": "trainer", "state": state}]}}


def test_job_status_maps_queued_running_and_success_with_result() -> None:
    assert job_status("j", _job({})).state == "queued"
    running = job_status("j", _job({"active": 1, "startTime": "2026-01-01T00:00:00Z"}), _pod(None))
    assert running.state == "running" and running.started_at == 1767225600.0
    done = job_status(
        "j",
        _job(
            {
                "startTime": "2026-01-01T00:00:00Z",
                "completionTime": "2026-01-01T00:00:30Z",
                "conditions": [{"type": "Complete", "status": "True"}],
            }
        ),
        _pod({"exitCode": 0, "reason": "Completed"}),
        logs='fitting ...\nMLSANDBOX_RESULT {"run_id": "r1", "metrics": {"val_auc": 0.9}}\n',
    )
    assert done.state == "succeeded" and done.exit_code == 0
    assert done.finished_at == 1767225630.0
    assert done.result == {"run_id": "r1", "metrics": {"val_auc": 0.9}}
    assert job_status("j", _job({}, suspend=True)).state == "cancelled"


def test_an_oom_killed_job_fails_with_137_like_on_local() -> None:
    pod = _pod({"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-01-01T00:01:00Z"})
    status = job_status("j", _job({"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]}), pod)
    assert status.state == "failed" and status.exit_code == OOM_EXIT
    assert status.finished_at == 1767225660.0
    assert oom_killed(pod) and not oom_killed(_pod({"exitCode": 1, "reason": "Error"}))
    deadline = job_status(
        "j",
        _job({"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}),
        _pod({"exitCode": 143, "reason": "Error"}),
    )
    assert deadline.state == "failed" and deadline.exit_code == 143


# ----------------------------------------------------------------------------------------------- chaos

T = chaos.Target(component="mlflow")
CASES: list[tuple[chaos.ChaosFault, str, dict[str, Any]]] = [
    (chaos.KillService(name="k", service="minio"), "PodChaos", {"action": "pod-kill"}),
    (
        chaos.PodKill(name="k", target=T, grace_period_s=5),
        "PodChaos",
        {"action": "pod-kill", "gracePeriod": 5},
    ),
    (
        chaos.PodFailure(name="k", target=T, duration="30s"),
        "PodChaos",
        {"action": "pod-failure", "duration": "30s"},
    ),
    (
        chaos.ContainerKill(name="k", target=T, containers=["mlflow"]),
        "PodChaos",
        {"action": "container-kill", "containerNames": ["mlflow"]},
    ),
    (
        chaos.NetworkDelay(name="k", target=T, latency_ms=250, jitter_ms=10, correlation=25),
        "NetworkChaos",
        {"action": "delay", "delay": {"latency": "250ms", "jitter": "10ms", "correlation": "25"}},
    ),
    (
        chaos.NetworkLoss(name="k", target=T, loss_percent=12.5),
        "NetworkChaos",
        {"action": "loss", "loss": {"loss": "12.5", "correlation": "0"}},
    ),
    (
        chaos.NetworkPartition(name="k", target=T, peer=chaos.Target(component="minio"), direction="to"),
        "NetworkChaos",
        {"action": "partition", "direction": "to"},
    ),
    (
        chaos.NetworkBandwidth(name="k", target=T, rate="10mbps"),
        "NetworkChaos",
        {"action": "bandwidth", "bandwidth": {"rate": "10mbps", "limit": 20000, "buffer": 10000}},
    ),
    (
        chaos.StressCpu(name="k", target=T, workers=2, load=50),
        "StressChaos",
        {"stressors": {"cpu": {"workers": 2, "load": 50}}},
    ),
    (
        chaos.StressMemory(name="k", target=T, size="512MB"),
        "StressChaos",
        {"stressors": {"memory": {"workers": 1, "size": "512MB"}}},
    ),
    (
        chaos.HttpAbort(name="k", target=T, port=5000),
        "HTTPChaos",
        {"abort": True, "port": 5000, "target": "Request"},
    ),
    (
        chaos.HttpDelay(name="k", target=T, port=5000, delay_ms=1500, method="GET"),
        "HTTPChaos",
        {"delay": "1500ms", "method": "GET", "path": "*"},
    ),
    (
        chaos.IoLatency(name="k", target=T, volume_path="/data", delay_ms=100, methods=["read"]),
        "IOChaos",
        {"action": "latency", "delay": "100ms", "volumePath": "/data", "percent": 100, "methods": ["read"]},
    ),
    (
        chaos.IoFault(name="k", target=T, volume_path="/data", path="/data/*.db", errno=28, percent=50),
        "IOChaos",
        {"action": "fault", "errno": 28, "path": "/data/*.db", "percent": 50},
    ),
    (
        chaos.TimeSkew(name="k", target=T, offset="-10m", containers=["mlflow"]),
        "TimeChaos",
        {"timeOffset": "-10m", "clockIds": ["CLOCK_REALTIME"], "containerNames": ["mlflow"]},
    ),
]


@pytest.mark.parametrize(("fault", "kind", "expected"), CASES, ids=[c[0].type for c in CASES])
def test_each_fault_maps_to_its_chaos_mesh_resource(
    fault: chaos.ChaosFault, kind: str, expected: dict[str, Any]
) -> None:
    manifest = chaos.chaos_resource(fault, namespace="sbx-default-demo", sandbox="demo")
    assert manifest["apiVersion"] == "chaos-mesh.org/v1alpha1" and manifest["kind"] == kind
    assert manifest["metadata"]["namespace"] == "sbx-default-demo"
    assert manifest["metadata"]["name"] == "mls-k"
    assert manifest["metadata"]["labels"]["mlsandbox.dev/fault"] == fault.type
    spec = manifest["spec"]
    for key, value in expected.items():
        assert spec[key] == value, key
    component = fault.service if isinstance(fault, chaos.KillService) else "mlflow"
    assert spec["selector"] == {
        "namespaces": ["sbx-default-demo"],
        "labelSelectors": {"app.kubernetes.io/component": component},
    }
    assert spec["mode"] == "all"


def test_partition_targets_the_peer_in_the_same_namespace_only() -> None:
    fault = chaos.NetworkPartition(
        name="p", target=T, peer=chaos.Target(component="minio", mode="fixed", value="1")
    )
    spec = chaos.chaos_resource(fault, namespace="ns-a", sandbox="a")["spec"]
    assert spec["target"] == {
        "mode": "fixed",
        "value": "1",
        "selector": {"namespaces": ["ns-a"], "labelSelectors": {"app.kubernetes.io/component": "minio"}},
    }


def test_faults_are_parsed_from_plain_data_and_bad_parameters_are_refused() -> None:
    from pydantic import TypeAdapter

    adapter: TypeAdapter[chaos.ChaosFault] = TypeAdapter(chaos.ChaosFault)
    fault = adapter.validate_python(
        {"type": "network_delay", "name": "slow", "target": {"component": "minio"}, "latency_ms": 100}
    )
    assert isinstance(fault, chaos.NetworkDelay)
    for bad in (
        {"type": "network_delay", "name": "slow", "target": {"component": "minio"}, "latency_ms": 0},
        {"type": "network_loss", "name": "l", "target": {"component": "minio"}, "loss_percent": 150},
        {"type": "pod_kill", "name": "Bad_Name", "target": {"component": "minio"}},
        {"type": "pod_kill", "name": "k", "target": {"component": "minio"}, "surprise": 1},
        {"type": "time_skew", "name": "k"},
    ):
        with pytest.raises(ValidationError):
            adapter.validate_python(bad)


def test_all_chaos_resources_validate_against_the_chaos_mesh_crds() -> None:
    docs = [chaos.chaos_resource(fault, namespace="ns", sandbox="s") for fault, _, _ in CASES]
    docs += list(chaos.example_resources().values())
    report = validate(docs)
    assert not report.failures, report.describe()


def test_chaos_schemas_are_strict() -> None:
    manifest = chaos.chaos_resource(chaos.PodKill(name="k", target=T), namespace="ns", sandbox="s")
    manifest["spec"]["surprise"] = True
    wrong_action = chaos.chaos_resource(chaos.PodKill(name="k", target=T), namespace="ns", sandbox="s")
    wrong_action["spec"]["action"] = "pod-explode"
    report = validate([manifest, wrong_action])
    assert [r.status for r in report.results] == ["statusInvalid", "statusInvalid"], report.results


def test_the_chaos_directory_holds_the_rendered_examples() -> None:
    files = {path.stem for path in schemas.CHAOS_DIR.glob("*.yaml")}
    assert files == set(chaos.EXAMPLES)
    for key in chaos.EXAMPLES:
        text = (schemas.CHAOS_DIR / f"{key}.yaml").read_text()
        assert text == chaos_example_text(key), (
            f"chaos/{key}.yaml is stale: run `mlsandbox kube chaos-examples`"
        )
    covered = {fault.type for fault in chaos.EXAMPLES.values()}
    assert covered == {c[0].type for c in CASES}


def test_chaos_schema_files_cover_the_kinds_we_generate() -> None:
    kinds = {c[1].lower() for c in CASES}
    present = {
        Path(p).name.split("_")[0] for p in (schemas.CHAOS_SCHEMA_DIR / "chaos-mesh.org").glob("*.json")
    }
    assert kinds <= present


def test_a_cnn_training_job_is_refused_as_unsupported_before_anything_is_made() -> None:
    """The trainer image has no PyTorch: a job of the image kind's CNN is the typed refusal at submission
    (the cluster is never asked), the pixel-feature model goes on."""
    from mlsandbox.backends.kube.jobs import KubeJobs
    from mlsandbox.errors import Unsupported

    class NoCluster:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"the cluster was asked: {name}")

    nothing: Any = NoCluster()
    jobs = KubeJobs(nothing, namespace="sbx", sandbox="s", image="i", endpoints=ENDPOINTS, secret=nothing)
    args = ["--task", "images", "--algorithm", "cnn", "--key", "raw/parts.parquet"]
    with pytest.raises(Unsupported, match="no PyTorch") as e:
        jobs.submit(JobSpec(job_id="ep-1-job-1", workload="trainer", args=args))
    assert e.value.capability == "jobs.cnn" and e.value.backend == "kube"


# ------------------------------------------------------------------------ script submission on a cluster

SCRIPT_NS = "sbx-demo"


class MemoryCluster:
    """The calls :class:`KubeJobs` makes for a script job, on objects in memory, as the API server answers:
    409 on creating what exists, ``None`` on getting what does not; ``refuse`` maps a kind to the
    :class:`ApiRefused` its next create raises (once)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str | None], dict[str, Any]] = {}
        self.refuse: dict[str, Exception] = {}
        self.deleted: list[tuple[str, str]] = []
        self._uids = 0

    def put(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self._uids += 1
        obj = copy.deepcopy(manifest)
        obj["metadata"]["uid"] = f"uid-{self._uids}"
        meta = obj["metadata"]
        self.objects[(obj["kind"], meta["name"], meta.get("namespace"))] = obj
        return obj

    def made(self) -> dict[tuple[str, str, str | None], dict[str, Any]]:
        """The Secrets and Jobs (not the scripts' NetworkPolicy, made on the first script job)."""
        return copy.deepcopy({key: o for key, o in self.objects.items() if key[0] != "NetworkPolicy"})

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        from mlsandbox.backends.kube.cluster import ApiRefused

        if manifest["kind"] in self.refuse:
            raise self.refuse.pop(manifest["kind"])
        meta = manifest["metadata"]
        if (manifest["kind"], meta["name"], meta.get("namespace")) in self.objects:
            raise ApiRefused(409, f"{manifest['kind']} {meta['name']!r} already exists")
        return copy.deepcopy(self.put(manifest))

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
        return copy.deepcopy(self.objects.get((kind, name, namespace)))

    def patch(self, api_version: str, kind: str, name: str, namespace: str | None, patch: Any) -> Any:
        obj = self.objects[(kind, name, namespace)]
        obj["metadata"].update(patch["metadata"])
        return copy.deepcopy(obj)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None, **kw: Any) -> bool:
        self.deleted.append((kind, name))
        return self.objects.pop((kind, name, namespace), None) is not None

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, selector: str | None = None
    ) -> list[Any]:
        return []  # no pods: the job is queued


def script_setup() -> tuple[MemoryCluster, Any, JobSpec]:
    from mlsandbox.backends.kube.jobs import KubeJobs
    from mlsandbox.backends.kube.workspaces import KubeWorkspaces

    class Workspaces(KubeWorkspaces):
        def credentials(self, workspace_id: str, timeout_s: float | None) -> dict[str, str]:
            self.bucket_of(workspace_id)
            return {"AccessKeyId": "AKIA", "SecretAccessKey": "new", "SessionToken": "t"}

    cluster = MemoryCluster()
    unused: Any = object()
    jobs = KubeJobs(
        cast(Any, cluster),
        namespace=SCRIPT_NS,
        sandbox="demo",
        image="i",
        endpoints=ENDPOINTS,
        secret=unused,
        control_namespace="mlsandbox",
    )
    jobs.workspaces = Workspaces(unused, ENDPOINTS)
    jobs.workspaces.open("7-abc", "ep-7-abc")
    script = JobSpec(
        job_id="ep-7-abc-job-2", workload="script", args=["train.py"], workspace="7-abc", timeout_s=60
    )
    return cluster, jobs, script


def test_a_leftover_script_secret_is_replaced_but_a_live_jobs_or_a_foreign_one_stands() -> None:
    """A crashed submission's Secret (no Job of the id, this sandbox's script labels) does not block the
    id: it is replaced by the new credentials and owned by the new Job. With the Job there, or a Secret of
    the same name that is not ours, the submission is "already exists" and nothing is deleted."""
    from mlsandbox.backends.kube import workspace_manifests as W

    old = {"AccessKeyId": "AKIA", "SecretAccessKey": "old", "SessionToken": "t"}
    name = job_name("ep-7-abc-job-2")

    cluster, jobs, script = script_setup()
    cluster.put(W.credentials_secret(script, SCRIPT_NS, old, "demo"))  # the leftover
    assert jobs.submit(script).state == "queued"
    secret = cluster.objects[("Secret", f"{name}-creds", SCRIPT_NS)]
    job = cluster.objects[("Job", name, SCRIPT_NS)]
    assert secret["stringData"]["AWS_SECRET_ACCESS_KEY"] == "new"
    assert [o["uid"] for o in secret["metadata"]["ownerReferences"]] == [job["metadata"]["uid"]]

    # the Job is there: the id is taken, its Secret stays as it is
    before = cluster.made()
    cluster.deleted.clear()
    with pytest.raises(ValueError, match="already exists"):
        jobs.submit(script)
    assert cluster.made() == before and cluster.deleted == []

    # a Secret of that name with other labels (another sandbox's, or not a script's) is not ours to delete
    for labels in ({}, {**W.script_labels(script, "other")}):
        cluster, jobs, script = script_setup()
        foreign = W.credentials_secret(script, SCRIPT_NS, old, "demo")
        foreign["metadata"]["labels"] = labels
        cluster.put(foreign)
        before = cluster.made()
        with pytest.raises(ValueError, match="already exists"):
            jobs.submit(script)
        assert cluster.made() == before and cluster.deleted == []
        assert ("Job", name, SCRIPT_NS) not in cluster.objects


@pytest.mark.parametrize("status", [422, 403])
def test_a_refused_script_job_leaves_no_secret_and_the_id_can_be_retried(status: int) -> None:
    from mlsandbox.backends.kube.cluster import ApiRefused

    cluster, jobs, script = script_setup()
    cluster.refuse["Job"] = ApiRefused(status, "refused")
    with pytest.raises(ValueError, match="refused by the cluster"):
        jobs.submit(script)
    assert cluster.made() == {}  # no Secret, no Job
    assert jobs.submit(script).state == "queued"
    secret = cluster.objects[("Secret", f"{job_name(script.job_id)}-creds", SCRIPT_NS)]
    job = cluster.objects[("Job", job_name(script.job_id), SCRIPT_NS)]
    assert secret["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
