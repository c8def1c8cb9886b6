"""The images a real node runs, without any registry: built locally, imported into the node's containerd.

What the chart and the node run: the pod sandbox (``pause``, a static binary from ``workloads/pause.c``),
CoreDNS and MinIO (the binaries ``scripts/install-kube-tools.sh --with-node`` and ``make setup`` build),
MLflow and Prefect (the versions pyproject.toml pins), the workload images (trainer, model server, Debian's
PostgreSQL for the PostgreSQL source, and the gateway that also runs the operator and the HTTP API source)
and the debootstrap base they all start from (also handy for test pods: Debian with Python). Dockerfiles
under ``workloads/``.

Each image has a key: a hash over everything it is made of (its Dockerfile, the files it copies, the
version stamps of the binaries, the build arguments, the base's recipe). The docker engine builds an
image only when no image of that name carries that key (label ``dev.mlsandbox.inputs``); the node's
containerd imports it (``docker save | ctr -n k8s.io images import``) only when the key it recorded at
the last import differs. With everything cached, :func:`ensure` does no docker work at all and takes
well under a second (no docker engine is even needed then).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from mlsandbox import __version__, paths
from mlsandbox.errors import BackendError, MissingToolError
from mlsandbox.versions import pinned

from .schemas import REPO_ROOT

INPUTS_LABEL = "dev.mlsandbox.inputs"
BASE_IMAGE = "mlsandbox/base:bookworm"
POSTGRES_MAJOR = "15"
"""The PostgreSQL of the PostgreSQL source's image: Debian bookworm's ``postgresql-15``."""
NAMESPACE = "k8s.io"
"""The containerd namespace the kubelet's CRI uses."""
_SKIP = {"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache"}
_DOCKER_HINT = "run scripts/docker-engine.sh as root (installs and starts Debian's docker engine)"

Say = Callable[[str], None]


@dataclass(frozen=True)
class NodeImage:
    """One image: its reference, how it is built and what it is made of."""

    name: str
    ref: str
    dockerfile: str
    """Path of the Dockerfile in the checkout."""
    inputs: tuple[str, ...] = ()
    """Files and folders of the checkout it copies (the build context is the checkout)."""
    staged: dict[str, str] = field(default_factory=dict)
    """Files of a staged build context instead: name in the context -> binary in ``$MLSANDBOX_HOME/bin``
    (``pause`` is compiled from ``workloads/pause.c``)."""
    build_args: dict[str, str] = field(default_factory=dict)
    on_base: bool = True
    """Built FROM the local debootstrap base (:data:`BASE_IMAGE`)."""

    @property
    def cri_ref(self) -> str:
        """The name containerd knows it by (``docker.io/`` + a reference without a registry)."""
        first = self.ref.split("/", 1)[0]
        has_registry = "/" in self.ref and ("." in first or ":" in first or first == "localhost")
        return self.ref if has_registry else f"docker.io/{self.ref}"


def _pins() -> dict[str, str]:
    """``name==version`` pins of pyproject.toml's dependencies and kube extra."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    pins = {}
    for spec in [*project["dependencies"], *project["optional-dependencies"]["kube"]]:
        name, sep, version = spec.partition("==")
        if sep:
            pins[name.strip()] = version.split(";")[0].strip()
    return pins


def _binary_version(name: str) -> str:
    stamp = paths.bin_dir() / f".{name}-version"
    if not (paths.bin_dir() / name).is_file() or not stamp.is_file():
        hint = (
            "run make setup"
            if name == "minio"
            else "run scripts/install-kube-tools.sh --with-node (builds it with Go; cached after)"
        )
        raise MissingToolError(f"`{name}` is not installed (expected {paths.bin_dir() / name}): {hint}")
    return stamp.read_text().split()[0]


def images() -> list[NodeImage]:
    """Every image of the node and the chart, base first."""
    pins = _pins()
    versions = pinned()
    tag = __version__
    workload = ("src/mlsandbox/__init__.py", "src/mlsandbox/workloads")
    return [
        NodeImage(
            "base",
            BASE_IMAGE,
            "scripts/build-base-image.sh",
            inputs=("scripts/build-base-image.sh",),
            on_base=False,
        ),
        NodeImage(
            "pause",
            "mlsandbox/pause:1",
            "workloads/Dockerfile.pause",
            staged={"pause": "pause"},
            on_base=False,
        ),
        NodeImage(
            "coredns",
            f"mlsandbox/coredns:{versions['COREDNS_VERSION']}",
            "workloads/Dockerfile.coredns",
            staged={"coredns": "coredns"},
            on_base=False,
        ),
        NodeImage(
            "minio",
            f"mlsandbox/minio:{_binary_version('minio') if (paths.bin_dir() / 'minio').is_file() else 'missing'}",
            "workloads/Dockerfile.minio",
            staged={"minio": "minio"},
        ),
        NodeImage(
            "mlflow",
            f"mlsandbox/mlflow:{pins['mlflow']}",
            "workloads/Dockerfile.mlflow",
            build_args={"MLFLOW_VERSION": pins["mlflow"], "UV_VERSION": versions["UV_VERSION"]},
        ),
        NodeImage(
            "prefect",
            f"mlsandbox/prefect:{pins['prefect']}",
            "workloads/Dockerfile.prefect",
            build_args={
                "PREFECT_VERSION": pins["prefect"],
                "PREFECT_KUBERNETES_VERSION": pins["prefect-kubernetes"],
                "UV_VERSION": versions["UV_VERSION"],
            },
        ),
        NodeImage(
            "trainer",
            f"mlsandbox/trainer:{tag}",
            "workloads/Dockerfile.trainer",
            inputs=workload,
            build_args={"MLFLOW_VERSION": pins["mlflow"], "UV_VERSION": versions["UV_VERSION"]},
        ),
        NodeImage(
            "model-server",
            f"mlsandbox/model-server:{tag}",
            "workloads/Dockerfile.model-server",
            inputs=workload,
            build_args={"MLFLOW_VERSION": pins["mlflow"], "UV_VERSION": versions["UV_VERSION"]},
        ),
        NodeImage(
            "postgres",
            f"mlsandbox/postgres:{POSTGRES_MAJOR}",
            "workloads/Dockerfile.postgres",
            inputs=("workloads/postgres",),
        ),
        NodeImage(
            "gateway",
            f"mlsandbox/gateway:{tag}",
            "workloads/Dockerfile.gateway",
            inputs=("pyproject.toml", "README.md", "src"),
            build_args={"MLFLOW_VERSION": pins["mlflow"], "UV_VERSION": versions["UV_VERSION"]},
        ),
    ]


def by_name(names: Iterable[str] | None = None) -> list[NodeImage]:
    """The images called ``names`` (all when None), in build order; ValueError naming an unknown one."""
    known = images()
    if names is None:
        return known
    wanted = set(names)
    unknown = wanted - {i.name for i in known}
    if unknown:
        raise ValueError(
            f"unknown image(s) {', '.join(sorted(unknown))}; known: {', '.join(i.name for i in known)}"
        )
    return [i for i in known if i.name in wanted]


def chart_values(names: Iterable[str] = ("minio", "mlflow", "prefect", "gateway", "trainer")) -> list[str]:
    """``helm --set`` arguments that point the chart at these images and never pull them."""
    refs = {i.name: i.ref.rpartition(":") for i in by_name(names)}
    targets = {
        "minio": ["minio.image"],
        "mlflow": ["mlflow.image"],
        "prefect": ["prefect.server.image", "prefect.worker.image"],
        "gateway": ["operator.image"],
        "trainer": ["workloads.trainerImage"],
    }
    args = ["--set", "imagePullPolicy=Never"]
    for name, (repository, _, tag) in refs.items():
        for key in targets[name]:
            args += ["--set", f"{key}.repository={repository}", "--set-string", f"{key}.tag={tag}"]
    return args


# ------------------------------------------------------------------------------------------------ keys


def _hash_path(h: hashlib._Hash, path: Path, rel: str) -> None:
    if path.is_dir():
        for child in sorted(path.iterdir()):
            if child.name in _SKIP or child.suffix == ".pyc" or child.name.endswith(".egg-info"):
                continue
            _hash_path(h, child, f"{rel}/{child.name}")
    elif path.is_file():
        h.update(f"{rel}\0{path.stat().st_size}\0".encode())
        h.update(path.read_bytes())
    else:
        raise BackendError(f"input {rel} of a node image is missing")


def key(image: NodeImage) -> str:
    """A hash over everything ``image`` is made of (16 hex digits)."""
    h = hashlib.sha256()
    h.update(
        json.dumps(
            {"ref": image.ref, "args": image.build_args, "base": image.on_base}, sort_keys=True
        ).encode()
    )
    _hash_path(h, REPO_ROOT / image.dockerfile, image.dockerfile)
    for rel in image.inputs:
        _hash_path(h, REPO_ROOT / rel, rel)
    for name, source in sorted(image.staged.items()):
        if source == "pause":
            _hash_path(h, REPO_ROOT / "workloads" / "pause.c", "workloads/pause.c")
        else:
            h.update(f"{name}\0{_binary_version(source)}\0".encode())
    if image.on_base:
        _hash_path(h, REPO_ROOT / "scripts" / "build-base-image.sh", "base")
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------- docker


def _docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise MissingToolError(f"building the node's images needs a docker engine: {_DOCKER_HINT}") from None
    if check and done.returncode != 0:
        raise BackendError(f"docker {' '.join(args[:3])} ... failed:\n{(done.stdout + done.stderr)[-4000:]}")
    return done


def _docker_key(ref: str) -> str | None:
    done = _docker(
        "image", "inspect", ref, "--format", f'{{{{index .Config.Labels "{INPUTS_LABEL}"}}}}', check=False
    )
    return done.stdout.strip() if done.returncode == 0 else None


def _check_engine() -> None:
    done = _docker("version", "--format", "{{.Server.Version}}", timeout=30, check=False)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        raise MissingToolError(f"no docker engine answers ({reason}): {_DOCKER_HINT}")


def build(image: NodeImage, say: Say = print) -> bool:
    """Build ``image`` with the docker engine unless an image of that name has its key; True if built."""
    want = key(image)
    if _docker_key(image.ref) == want:
        return False
    _check_engine()
    started = time.monotonic()
    if image.name == "base":
        say(f"{image.ref}: debootstrap + docker import (about 3 minutes, once)")
        script = REPO_ROOT / image.dockerfile
        done = subprocess.run(
            [str(script), "--force", image.ref], capture_output=True, text=True, timeout=1800, check=False
        )
        if done.returncode != 0:
            raise BackendError(f"{script.name} failed:\n{(done.stdout + done.stderr)[-4000:]}")
        # The script imports the tree; the key goes on with a one-line build on top of it.
        _label(image.ref, want)
    else:
        if image.on_base:
            build(by_name(["base"])[0], say)
        say(f"{image.ref}: docker build ({image.dockerfile})")
        with tempfile.TemporaryDirectory(prefix="mlsandbox-image-") as tmp:
            context = _stage(image, Path(tmp)) if image.staged else REPO_ROOT
            args = [f"--build-arg={k}={v}" for k, v in sorted(image.build_args.items())]
            if image.on_base:
                args.append(f"--build-arg=BASE_IMAGE={BASE_IMAGE}")
            _docker(
                "build", "-q", "-f", str(REPO_ROOT / image.dockerfile), *args,
                "--label", f"{INPUTS_LABEL}={want}", "-t", image.ref, str(context), timeout=3600,
            )  # fmt: skip
    # Earlier builds of our images that lost their tag take space for nothing.
    _docker("image", "prune", "-f", "--filter", f"label={INPUTS_LABEL}", check=False)
    say(f"{image.ref}: built in {time.monotonic() - started:.0f} s")
    return True


def _label(ref: str, value: str) -> None:
    with tempfile.TemporaryDirectory(prefix="mlsandbox-image-") as tmp:
        (Path(tmp) / "Dockerfile").write_text(f"FROM {ref}\nLABEL {INPUTS_LABEL}={value}\n")
        _docker("build", "-q", "-t", ref, tmp, timeout=300)


def _stage(image: NodeImage, context: Path) -> Path:
    for name, source in image.staged.items():
        if source == "pause":
            gcc = shutil.which("gcc")
            if gcc is None:
                raise MissingToolError("the pause image is compiled with gcc: apt-get install gcc libc6-dev")
            done = subprocess.run(
                [
                    gcc,
                    "-Os",
                    "-static",
                    "-s",
                    "-o",
                    str(context / name),
                    str(REPO_ROOT / "workloads" / "pause.c"),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise BackendError(
                    f"compiling workloads/pause.c failed (static libc: apt-get install libc6-dev):\n{done.stderr}"
                )
        else:
            _binary_version(source)
            shutil.copy2(paths.bin_dir() / source, context / name)
    return context


# ------------------------------------------------------------------------------------------ containerd


def imported_keys(stamp: Path) -> dict[str, str]:
    try:
        return dict(json.loads(stamp.read_text()))
    except (OSError, ValueError):
        return {}


_STALE_SNAPSHOT = "does not exist: not found"
"""What ``ctr images import`` says when a layer's parent snapshot went missing under it."""


def _import(ctr: list[str], ref: str) -> str:
    """``docker save REF | ctr images import -``: what failed ('' when it worked)."""
    save = subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    load = subprocess.run(
        [*ctr, "-n", NAMESPACE, "images", "import", "-"],
        stdin=save.stdout,
        capture_output=True,
        text=True,
        check=False,
    )
    assert save.stdout is not None
    save.stdout.close()
    save_err = save.stderr.read().decode(errors="replace") if save.stderr else ""
    if save.wait() != 0 or load.returncode != 0:
        return f"{save_err}{load.stdout}{load.stderr}" or "no output"
    return ""


def import_image(ctr: list[str], image: NodeImage, say: Say = print) -> None:
    """Import ``image`` from the docker engine into containerd; a BackendError with what ``docker save``
    and ``ctr`` said when it fails."""
    failure = _import(ctr, image.ref)
    if failure and _STALE_SNAPSHOT in failure:
        # An import interrupted earlier (a crash, a killed run) leaves layers whose snapshots
        # containerd's garbage collector removes under the next unpack: drop the image's record and
        # import it once more, from its layers.
        say(f"{image.ref}: containerd lost a layer's snapshot ({failure.strip().splitlines()[-1]}); again")
        subprocess.run(
            [*ctr, "-n", NAMESPACE, "images", "rm", "--sync", image.cri_ref], capture_output=True, check=False
        )
        failure = _import(ctr, image.ref)
    if failure:
        raise BackendError(f"importing {image.ref} into containerd failed:\n{failure}")


def ensure(
    ctr: list[str],
    stamp: Path,
    names: Iterable[str] | None = None,
    say: Say = print,
) -> dict[str, float]:
    """Make containerd (``ctr``: the command line that reaches it) hold these images at their current
    keys: build what changed, import what containerd lacks. ``stamp`` records the keys imported (it
    lives beside containerd's root, so it goes when the images go). Returns seconds spent per image
    (built and/or imported; nothing when cached)."""
    done = imported_keys(stamp)
    present = set(
        subprocess.run(
            [*ctr, "-n", NAMESPACE, "images", "ls", "-q"], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    spent: dict[str, float] = {}
    for image in by_name(names):
        want = key(image)
        if done.get(image.name) == want and image.cri_ref in present:
            continue
        started = time.monotonic()
        build(image, say)
        say(f"{image.ref}: importing into containerd")
        import_image(ctr, image, say)
        done[image.name] = want
        stamp.write_text(json.dumps(done, indent=1, sort_keys=True))
        spent[image.name] = time.monotonic() - started
        say(f"{image.ref}: ready in containerd ({spent[image.name]:.0f} s)")
    return spent


def main(argv: list[str] | None = None) -> int:
    """``python -m mlsandbox.backends.kube.node_images [NAME...]``: build the images whose inputs changed
    (all by default) with the docker engine, before a node imports them; prints what it did."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m mlsandbox.backends.kube.node_images", description=main.__doc__
    )
    parser.add_argument(
        "names", nargs="*", help=f"images to build (default: all of {', '.join(i.name for i in images())})"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        chosen = by_name(args.names or None)
        for image in chosen:
            if not build(image, lambda line: print(f"[node-images] {line}", flush=True)):
                print(f"[node-images] {image.ref}: cached (inputs {key(image)})", flush=True)
    except (BackendError, MissingToolError, ValueError) as exc:
        print(f"[node-images] error: {exc}", file=sys.stderr)
        return 1
    print(f"[node-images] {len(chosen)} image(s) ready in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
