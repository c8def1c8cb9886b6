"""Named environments on the kube backend, without a cluster: the Job's shape, the boot that isolates a
workload on the environment's packages (run for real here), and the store's bookkeeping over an in-memory
S3 fake. tests/node plays the whole thing on real pods."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import ENDPOINTS

from mlsandbox.backends.kube import environments as E
from mlsandbox.backends.kube import manifests as M
from mlsandbox.backends.protocols import JobSpec
from mlsandbox.backends.protocols.environments import DEFAULT_KEY
from mlsandbox.errors import Unsupported


def job(environment: str | None) -> dict[str, Any]:
    spec = JobSpec(job_id="j1", workload="trainer", args=["--task", "binary"], environment=environment)
    return M.training_job(spec, namespace="ns", image="trainer:1", endpoints=ENDPOINTS, s3_secret="s3")


def test_a_job_in_an_environment_unpacks_it_first_and_runs_on_it_alone() -> None:
    plain = job(None)["spec"]["template"]["spec"]
    assert "initContainers" not in plain
    assert plain["containers"][0]["command"] == [
        "python",
        "-m",
        "mlsandbox.workloads.trainer",
        "--task",
        "binary",
    ]
    pod = job("0123456789abcdef")["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][-3:] == [M.ENV_BUCKET, "0123456789abcdef/site.tar", M.ENV_DIR]
    assert init["securityContext"] == pod["containers"][0]["securityContext"]  # as locked down
    assert init["resources"] == pod["containers"][0]["resources"]
    (main,) = pod["containers"]
    assert main["command"] == [
        *("python", "-S", "-c", M.ENV_BOOT, M.ENV_DIR),
        *("mlsandbox.workloads.trainer", "--task", "binary"),
    ]
    assert {"name": M.ENV_VOLUME, "mountPath": M.ENV_DIR, "readOnly": True} in main["volumeMounts"]
    assert {"name": M.ENV_VOLUME, "emptyDir": {"sizeLimit": M.ENV_SIZE_LIMIT}} in pod["volumes"]
    # The sandbox's own module (the scorer) is labelled as what it is.
    spec = JobSpec(job_id="s1", workload="trainer", args=[], environment="0123456789abcdef")
    scorer = M.sandbox_job(
        spec, namespace="ns", sandbox="sb", image="t:1", endpoints=ENDPOINTS, module="scorer"
    )
    assert scorer["metadata"]["labels"][M.COMPONENT_LABEL] == "scorer"
    assert "mlsandbox.workloads.scorer" in scorer["spec"]["template"]["spec"]["containers"][0]["command"]


def test_the_boot_isolates_the_workload_on_the_environments_packages(tmp_path: Path) -> None:
    """ENV_BOOT run by this interpreter with ``-S``: the environment's packages (and its .pth files) are
    importable, the interpreter's own site-packages are not, and the module gets its own arguments."""
    site = tmp_path / "env"
    (site / "pinned").mkdir(parents=True)
    (site / "pinned" / "__init__.py").write_text("VERSION = '1.5.2'\n")
    (site / "extra").mkdir()
    (site / "extra" / "viapth.py").write_text("OK = True\n")
    (site / "extra.pth").write_text("extra\n")
    app = tmp_path / "app"
    app.mkdir()
    (app / "probe_workload.py").write_text(
        "import json, sys\n"
        "import pinned, viapth\n"
        "try:\n    import pydantic\n    leaked = True\nexcept ImportError:\n    leaked = False\n"
        "print(json.dumps({'argv': sys.argv[1:], 'pinned': pinned.VERSION, 'pth': viapth.OK, 'leaked': leaked}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", M.ENV_BOOT, str(site), "probe_workload", "--x", "1"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(app), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    out = json.loads(done.stdout)
    assert out == {"argv": ["--x", "1"], "pinned": "1.5.2", "pth": True, "leaked": False}


def test_packages_and_platform() -> None:
    assert E.image_platform("x86_64") == "x86_64-manylinux_2_36"
    assert E.image_platform("arm64") == "aarch64-manylinux_2_36"
    assert E.env_key(["scikit-learn==1.5.2"]) == E.env_key(["scikit-learn==1.5.2"])
    assert E.env_key(["scikit-learn==1.5.2"]) != E.env_key(["scikit-learn==1.5.1"])
    assert E.env_key(["a==1"], "x86_64-manylinux_2_36") != E.env_key(["a==1"], "aarch64-manylinux_2_36")


def test_installed_packages_read_the_dist_info(tmp_path: Path) -> None:
    for name, version in (("scikit_learn", "1.5.2"), ("numpy", "2.1.0")):
        meta = tmp_path / f"{name}-{version}.dist-info"
        meta.mkdir()
        pretty = name.replace("_", "-")
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {pretty}\nVersion: {version}\n\nbody\n")
    assert E.installed_packages(tmp_path) == {"numpy": "2.1.0", "scikit-learn": "1.5.2"}


class FakeS3Client:
    """The boto3 call the store does not wrap (a large file's upload), over the store's dict."""

    def __init__(self, buckets: dict[str, dict[str, bytes]]) -> None:
        self.buckets = buckets

    def upload_file(self, path: str, bucket: str, key: str) -> None:
        self.buckets[bucket][key] = Path(path).read_bytes()


class FakeStore:
    """The object store's calls the environments make, over a dict (bucket -> key -> bytes)."""

    def __init__(self) -> None:
        self.buckets: dict[str, dict[str, bytes]] = {}
        self.client = FakeS3Client(self.buckets)

    def create_bucket(self, bucket: str) -> None:
        self.buckets.setdefault(bucket, {})

    def put_object(self, bucket: str, key: str, data: bytes) -> None:
        self.buckets[bucket][key] = data

    def get_object(self, bucket: str, key: str) -> bytes:
        if key not in self.buckets.get(bucket, {}):
            raise KeyError(f"object s3://{bucket}/{key} does not exist")
        return self.buckets[bucket][key]

    def delete_object(self, bucket: str, key: str) -> None:
        self.buckets.get(bucket, {}).pop(key, None)


def test_an_environment_is_built_once_stored_and_found_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[str] = []

    def fake_build(reqs: list[str], key: str, target: str | None = None) -> tuple[Path, dict[str, Any]]:
        built.append(key)
        tar = tmp_path / f"{key}.tar"
        tar.write_bytes(b"archive")
        return tar, {"key": key, "requirements": reqs, "packages": {"scikit-learn": "1.5.2"}}

    monkeypatch.setattr(E, "build_archive", fake_build)
    store = FakeStore()
    envs = E.KubeEnvironments(store)  # type: ignore[arg-type]
    info = envs.build(["scikit-learn==1.5.2"])
    assert info.packages == {"scikit-learn": "1.5.2"} and built == [info.key]
    objects = store.buckets[M.ENV_BUCKET]
    assert objects[M.environment_object(info.key)] == b"archive"
    assert json.loads(objects[f"{info.key}/info.json"])["key"] == info.key
    assert envs.build(["scikit-learn == 1.5.2"]) == info and built == [info.key]  # normalised, cached
    other = E.KubeEnvironments(store)  # type: ignore[arg-type]
    assert other.get(info.key) == info and other.build(["scikit-learn==1.5.2"]) == info  # from the store
    assert built == [info.key]
    assert other.get(DEFAULT_KEY) == other.default()
    with pytest.raises(KeyError, match="has not been built"):
        other.get("0123456789abcdef")
    with pytest.raises(ValueError, match="only names with version specifiers"):
        envs.build(["https://example.invalid/x.whl"])
    with pytest.raises(Unsupported) as refused:
        envs.for_serving(info)
    assert refused.value.capability == "serving.environment"


def test_without_a_store_building_is_refused() -> None:
    with pytest.raises(Unsupported) as refused:
        E.KubeEnvironments().build(["scikit-learn==1.5.2"])
    assert refused.value.capability == "environments.build"


def test_the_archive_is_built_once_and_a_dead_builders_leftovers_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uv stands in as a function that installs one distribution where ``--target`` says."""
    import tarfile

    monkeypatch.setattr(E, "archive_dir", lambda: tmp_path)
    monkeypatch.setattr(E, "uv_binary", lambda: "uv")
    calls: list[list[str]] = []

    def fake_install(argv: list[str], what: str = "") -> str:
        calls.append(argv)
        site = Path(argv[argv.index("--target") + 1])
        (site / "pinned").mkdir(parents=True)
        (site / "pinned" / "__init__.py").write_text("")
        meta = site / "pinned-1.5.2.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text("Name: pinned\nVersion: 1.5.2\n")
        return ""

    monkeypatch.setattr(E, "uv_install", fake_install)
    dead = tmp_path / ".0123456789abcdef.999999999.site"  # no such pid
    dead.mkdir()
    dead.with_suffix(".tar").write_bytes(b"half")
    tar, info = E.build_archive(["pinned==1.5.2"], "0123456789abcdef", "x86_64-manylinux_2_36")
    assert not dead.exists() and not dead.with_suffix(".tar").exists()
    (argv,) = calls
    assert argv[argv.index("--python-version") + 1] == E.IMAGE_PYTHON
    assert argv[argv.index("--python-platform") + 1] == "x86_64-manylinux_2_36"
    assert info["packages"] == {"pinned": "1.5.2"} and info["bytes"] == tar.stat().st_size
    with tarfile.open(tar) as t:
        assert {"pinned/__init__.py", "pinned-1.5.2.dist-info/METADATA"} <= set(t.getnames())
    assert E.build_archive(["pinned==1.5.2"], "0123456789abcdef") == (tar, info) and len(calls) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0123456789abcdef.json", "0123456789abcdef.tar"]
