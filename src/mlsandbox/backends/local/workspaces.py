"""Code workspaces on ``local``: a directory per episode, and the isolation its scripts run in.

Layout: ``<sandbox_dir>/workspaces/<episode>/files`` (the workspace, ``/workspace`` inside) and ``.../run``
(Unix sockets of the forwarding path, read-only inside).

Isolation of a ``script`` job (built by :meth:`LocalWorkspaces.launch`; the job's cgroups and timer are the
jobs' own, :mod:`mlsandbox.backends.local.jobs`):

- **Namespaces** (bubblewrap): own PID, mount, network, IPC and UTS namespaces. The mount namespace holds
  read-only binds of ``/usr``, the base interpreter and the project venv, a fresh ``/proc``, ``/dev`` and
  ``/tmp``, and the workspace: no other host file (no home, no sandbox directory, no holdout, no store
  credentials of the grader) exists in it. The PID namespace shows only the script's own processes:
  the gateway's ``/proc/<pid>/environ`` and ``mem`` and the services' processes cannot be named.
- **Never root**: as root, bubblewrap builds the namespaces and ``setpriv`` then drops to a dedicated
  unprivileged uid per workspace (no capabilities, empty bounding set, ``no_new_privs``); as a normal
  user, bubblewrap's user namespace maps the caller's own uid.
- **Network**: the network namespace has only a loopback device. The sandbox's MinIO and MLflow ports are
  reachable through a forwarding path: inside, a small forwarder (:mod:`.workspace_boot`) listens on
  ``127.0.0.1:<port>`` and relays each connection over a Unix socket of ``run/`` to a relay thread of this
  process, which connects to that one port only. Nothing else (the internet, other sandboxes, any other
  host listener, Prefect, whose variables hold the sandbox's root store credentials) has a route.
- **Store credentials**: temporary ones from MinIO's STS ``AssumeRole`` with an inline session policy
  allowing ``s3:*`` on the episode's bucket only, minted per run, expiring after it. MLflow's artifacts go
  through its server (``--serve-artifacts``), so no store credential of the tracker is needed.
- **Limits**: CPU and memory (the job's cgroups), processes (``RLIMIT_NPROC`` of the workspace's uid),
  file size (``RLIMIT_FSIZE``), disk (as root the workspace is a ``tmpfs`` of :data:`QUOTA_BYTES`; without
  root only the file size limit holds), wall time (the job's ``timeout_s``).

A workspace's directory carries its owner (``owner``: ``<pid>-<start ticks>`` of the process that opened
it): ``mlsandbox gc`` unmounts and removes the workspaces whose owner is gone (:func:`collect_stale`).

Files are read and written by this process with every path component opened ``O_NOFOLLOW`` under the
workspace's directory descriptor: a symbolic link a script plants never leads outside.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from mlsandbox.backends.common.workspaces import (
    MAX_LISTED,
    MAX_PROCS,
    check_id,
    clean_path,
    file_path,
    quota_error,
    scoped_credentials,
    uid_of,
)
from mlsandbox.backends.protocols import (
    MAX_FILE_BYTES,
    QUOTA_BYTES,
    Endpoints,
    JobSpec,
    WorkspaceEntry,
    WorkspaceError,
    WorkspaceUsage,
)
from mlsandbox.errors import MissingToolError

INSTALL_HINT = "install bubblewrap (Debian: apt-get install -y bubblewrap; or run scripts/setup.sh)"
INSIDE = "/workspace"
RUN_INSIDE = "/run/mlsandbox"
BOOT = Path(__file__).with_name("workspace_boot.py")
BOOT_INSIDE = "/opt/mlsandbox/boot.py"
OWNER_FILE = "owner"
MOUNT_SOURCE = "mlsandbox-workspace"


def bwrap_binary() -> str | None:
    return shutil.which("bwrap")


def unavailable_reason() -> str | None:
    """Why scripts cannot run isolated here (None: they can)."""
    if not sys.platform.startswith("linux"):
        return "agent code is isolated with Linux namespaces (bubblewrap): not available on this platform"
    if bwrap_binary() is None:
        return f"`bwrap` is not installed: {INSTALL_HINT}"
    return None


# --------------------------------------------------------------------------------------- relays


@dataclass
class _Relay:
    """A Unix socket in ``run/`` whose every connection is relayed to one TCP port of this machine."""

    path: Path
    host: str
    port: int
    server: socket.socket = field(init=False)
    closed: bool = False

    def start(self, uid: int | None) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(self.path))
        if uid is not None:
            os.chown(self.path, uid, uid)
        os.chmod(self.path, 0o600)
        self.server.listen(64)
        threading.Thread(target=self._accept, name=f"ws-relay-{self.port}", daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            upstream = socket.create_connection((self.host, self.port), timeout=10)
        except OSError:
            conn.close()
            return
        upstream.settimeout(None)
        t = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
        t.start()
        _pump(conn, upstream)
        t.join(timeout=60)

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.server.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            src.close()


# ------------------------------------------------------------------------------------- workspaces


@dataclass
class _Workspace:
    workspace_id: str
    root: Path
    bucket: str
    uid: int | None
    mounted: bool = False
    relays: list[_Relay] = field(default_factory=list)

    @property
    def files(self) -> Path:
        return self.root / "files"

    @property
    def run(self) -> Path:
        return self.root / "run"


class LocalWorkspaces:
    """The :class:`~mlsandbox.backends.protocols.Workspaces` of a local sandbox (see the module docstring)."""

    def __init__(self, sandbox_dir: Path, endpoints: Endpoints, quota_bytes: int = QUOTA_BYTES) -> None:
        self.base = sandbox_dir / "workspaces"
        self.endpoints = endpoints
        self.quota_bytes = quota_bytes
        self._root = os.geteuid() == 0
        self._lock = threading.RLock()
        self._spaces: dict[str, _Workspace] = {}

    # ------------------------------------------------------------------------------------------ files

    def open(self, workspace_id: str, bucket: str) -> None:
        check_id(workspace_id)
        with self._lock:
            if workspace_id in self._spaces:
                return
            uid = uid_of(workspace_id) if self._root else None
            ws = _Workspace(workspace_id, self.base / workspace_id, bucket, uid)
            ws.root.mkdir(parents=True, exist_ok=True)
            (ws.root / OWNER_FILE).write_text(_owner_marker())
            ws.files.mkdir(parents=True, exist_ok=True)
            ws.run.mkdir(parents=True, exist_ok=True)
            if self._root:
                ws.mounted = _mount_tmpfs(ws.files, self.quota_bytes, ws.uid or 0)
                os.chown(ws.files, ws.uid or 0, ws.uid or 0)
                os.chmod(ws.files, 0o700)
                os.chown(ws.run, ws.uid or 0, ws.uid or 0)
                os.chmod(ws.run, 0o500)
            for name, url in (("s3", self.endpoints.s3_url), ("mlflow", self.endpoints.mlflow_url)):
                parts = urlsplit(url)
                if parts.hostname and parts.port:
                    relay = _Relay(ws.run / f"{name}.sock", parts.hostname, parts.port)
                    relay.start(ws.uid)
                    ws.relays.append(relay)
            self._spaces[workspace_id] = ws

    def _space(self, workspace_id: str) -> _Workspace:
        with self._lock:
            ws = self._spaces.get(workspace_id)
        if ws is None:
            raise WorkspaceError("not_found", f"workspace {workspace_id!r} is not open")
        return ws

    def write_file(self, workspace_id: str, path: str, data: bytes) -> int:
        ws = self._space(workspace_id)
        parts = file_path(path, data)
        if self.usage(workspace_id).used_bytes + len(data) > self.quota_bytes:
            raise quota_error(self.quota_bytes)
        with _beneath(ws.files, parts[:-1], create=True, uid=ws.uid) as dfd:
            tmp = f".{parts[-1]}.partial"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
            except OSError as e:
                raise WorkspaceError("invalid_parameters", f"{path!r}: cannot write: {e.strerror}") from None
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                if ws.uid is not None:
                    os.chown(tmp, ws.uid, ws.uid, dir_fd=dfd, follow_symlinks=False)
                os.replace(tmp, parts[-1], src_dir_fd=dfd, dst_dir_fd=dfd)
            except OSError as e:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                if e.errno == errno.ENOSPC:
                    raise WorkspaceError("quota_exceeded", "the workspace is full") from None
                raise WorkspaceError("invalid_parameters", f"{path!r}: cannot write: {e.strerror}") from None
        return len(data)

    def read_file(self, workspace_id: str, path: str, max_bytes: int = MAX_FILE_BYTES) -> tuple[bytes, int]:
        ws = self._space(workspace_id)
        parts = file_path(path)
        with _beneath(ws.files, parts[:-1], create=False, uid=None) as dfd:
            try:
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
            except FileNotFoundError:
                raise WorkspaceError("not_found", f"{path!r} does not exist in the workspace") from None
            except OSError as e:
                raise WorkspaceError("invalid_parameters", f"{path!r}: cannot read: {e.strerror}") from None
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise WorkspaceError("invalid_parameters", f"{path!r} is not a regular file")
                return f.read(max_bytes), st.st_size

    def list_files(self, workspace_id: str, path: str = ".") -> list[WorkspaceEntry]:
        ws = self._space(workspace_id)
        parts = clean_path(path)
        out: list[WorkspaceEntry] = []
        try:
            with _beneath(ws.files, parts, create=False, uid=None) as dfd:
                self._walk(dfd, "/".join(parts), out)
        except WorkspaceError:
            raise
        return sorted(out, key=lambda e: e.path)[:MAX_LISTED]

    def _walk(self, dfd: int, prefix: str, out: list[WorkspaceEntry]) -> None:
        for name in sorted(os.listdir(dfd)):
            if len(out) >= MAX_LISTED:
                return
            rel = f"{prefix}/{name}" if prefix else name
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                out.append(WorkspaceEntry(path=rel, kind="dir", size=0))
                try:
                    sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
                except OSError:
                    continue
                try:
                    self._walk(sub, rel, out)
                finally:
                    os.close(sub)
            else:
                regular = stat.S_ISREG(st.st_mode)
                out.append(
                    WorkspaceEntry(
                        path=rel, kind="file" if regular else "other", size=st.st_size if regular else 0
                    )
                )

    def usage(self, workspace_id: str) -> WorkspaceUsage:
        ws = self._space(workspace_id)
        used = 0
        if ws.mounted:
            st = os.statvfs(ws.files)
            used = (st.f_blocks - st.f_bfree) * st.f_frsize
        else:
            for dirpath, _, names in os.walk(ws.files):
                for n in names:
                    with contextlib.suppress(OSError):
                        used += os.lstat(os.path.join(dirpath, n)).st_size
        return WorkspaceUsage(used_bytes=used, quota_bytes=self.quota_bytes)

    def close(self, workspace_id: str) -> None:
        with self._lock:
            ws = self._spaces.pop(workspace_id, None)
        if ws is None:
            return
        for relay in ws.relays:
            relay.close()
        remove(ws.root, mounted=ws.mounted)

    def close_all(self) -> None:
        with self._lock:
            ids = list(self._spaces)
        for workspace_id in ids:
            self.close(workspace_id)

    # ------------------------------------------------------------------------------------------ runs

    def launch(self, spec: JobSpec, thread_env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """The command and environment of a ``script`` job: ``spec.args`` = the script's path in the
        workspace, then its arguments. :class:`WorkspaceError` for a bad path or workspace,
        :class:`MissingToolError` without bubblewrap."""
        why = unavailable_reason()
        if why is not None:
            raise MissingToolError(why)
        if spec.workspace is None or not spec.args:
            raise WorkspaceError("invalid_parameters", "a script job needs a workspace and a script path")
        ws = self._space(spec.workspace)
        script = clean_path(spec.args[0])
        if not script:
            raise WorkspaceError("invalid_parameters", "give the script's path in the workspace")
        creds = self._credentials(ws, spec.timeout_s)
        env = {
            "PATH": f"{sys.prefix}/bin:/usr/local/bin:/usr/bin:/bin",
            "HOME": INSIDE,
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "MPLCONFIGDIR": "/tmp",
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "1",
            "AWS_ACCESS_KEY_ID": creds["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": creds["SecretAccessKey"],
            "AWS_SESSION_TOKEN": creds["SessionToken"],
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_S3": self.endpoints.s3_url,
            "MLFLOW_S3_ENDPOINT_URL": self.endpoints.s3_url,
            "MLFLOW_TRACKING_URI": self.endpoints.mlflow_url,
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
            "MLFLOW_HTTP_REQUEST_TIMEOUT": "60",
            "MLSANDBOX_BUCKET": ws.bucket,
            "MLSANDBOX_WORKSPACE": INSIDE,
            **thread_env,
            **{k: v for k, v in spec.env.items() if k.startswith("MLSANDBOX_")},
        }
        forwards = {
            str(urlsplit(url).port): f"{RUN_INSIDE}/{name}.sock"
            for name, url in (("s3", self.endpoints.s3_url), ("mlflow", self.endpoints.mlflow_url))
        }
        bwrap = bwrap_binary()
        assert bwrap is not None
        argv = [bwrap, *self._namespaces(), *self._binds(ws), "--clearenv"]
        for k, v in env.items():
            argv += ["--setenv", k, v]
        inner = [
            sys.executable,
            "-I",
            "-S",
            BOOT_INSIDE,
            json.dumps(forwards),
            str(MAX_PROCS if ws.uid is not None else 0),
            str(self.quota_bytes),
            sys.executable,
            "/".join(script),
            *spec.args[1:],
        ]
        if ws.uid is not None:
            inner = [
                "setpriv",
                f"--reuid={ws.uid}",
                f"--regid={ws.uid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
                *inner,
            ]
        return [*argv, "--", *inner], {"PATH": "/usr/bin:/bin"}

    def _namespaces(self) -> list[str]:
        common = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        if not self._root:
            common = ["--unshare-user", *common]
        return (
            [*common, "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
            if not self._root
            else [
                *common,
                "--die-with-parent",
                "--new-session",
            ]
        )

    def _binds(self, ws: _Workspace) -> list[str]:
        out = [
            "--ro-bind", "/usr", "/usr",
        ]  # fmt: skip
        for link in ("bin", "lib", "lib64", "sbin"):
            p = Path("/") / link
            if p.is_symlink():
                out += ["--symlink", os.readlink(p), str(p)]
            elif p.is_dir():
                out += ["--ro-bind", str(p), str(p)]
        # The kernel's and the scratch file systems first: an interpreter or a venv under /tmp (a checkout
        # there) is bound on top of the fresh /tmp, not hidden by it.
        out += [
            "--proc", "/proc",
            "--dev", "/dev",
            "--perms", "1777", "--tmpfs", "/dev/shm",
            "--perms", "1777", "--tmpfs", "/tmp",
        ]  # fmt: skip
        made: set[str] = {"/", "/usr", "/proc", "/dev", "/dev/shm", "/tmp"}
        for src in sorted(
            {str(Path(sys.base_prefix).resolve()), str(Path(sys.prefix).resolve()), sys.prefix}
        ):
            for parent in reversed(Path(src).parents):
                if str(parent) not in made:
                    made.add(str(parent))
                    out += ["--perms", "0755", "--dir", str(parent)]
            if src not in made:
                made.add(src)
                out += ["--ro-bind", src, src]
        out += [
            "--bind", str(ws.files), INSIDE,
            "--perms", "0755", "--dir", "/run",
            "--ro-bind", str(ws.run), RUN_INSIDE,
            "--perms", "0755", "--dir", "/opt",
            "--perms", "0755", "--dir", "/opt/mlsandbox",
            "--ro-bind", str(BOOT), BOOT_INSIDE,
            "--chdir", INSIDE,
        ]  # fmt: skip
        return out

    def _credentials(self, ws: _Workspace, timeout_s: float | None) -> dict[str, str]:
        """Temporary store credentials limited to the workspace's bucket (MinIO STS AssumeRole)."""
        return scoped_credentials(self.endpoints, ws.bucket, f"ws-{ws.workspace_id}", timeout_s)


@contextlib.contextmanager
def _beneath(root: Path, parts: tuple[str, ...], *, create: bool, uid: int | None) -> Iterator[int]:
    """A directory descriptor of ``root/parts``, each component opened without following links."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise WorkspaceError(
                        "not_found", f"{'/'.join(parts[: i + 1])!r} does not exist in the workspace"
                    ) from None
                os.mkdir(part, 0o755, dir_fd=fd)
                if uid is not None:
                    os.chown(part, uid, uid, dir_fd=fd, follow_symlinks=False)
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as e:
                what = "a symbolic link" if e.errno == errno.ELOOP else "not a directory"
                raise WorkspaceError(
                    "invalid_parameters", f"{'/'.join(parts[: i + 1])!r} is {what}: cannot go through it"
                ) from None
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------ garbage collection


def _owner_marker() -> str:
    from mlsandbox.backends.local.supervisor import start_ticks

    return f"{os.getpid()}-{start_ticks(os.getpid())}"


def _owner_alive(owner: str) -> bool:
    from mlsandbox.backends.local.supervisor import start_ticks

    pid_s, _, ticks_s = owner.strip().partition("-")
    try:
        return start_ticks(int(pid_s)) == int(ticks_s)
    except ValueError:
        return False


def workspace_mounts(under: Path) -> list[Path]:
    """The mount points of workspace tmpfs under ``under`` (this mount namespace's table)."""
    try:
        table = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return []
    found = []
    prefix = str(under.resolve()).rstrip("/") + "/"
    for line in table.splitlines():
        fields, _, tail = line.partition(" - ")
        parts, rest = fields.split(), tail.split()
        if len(parts) < 5 or len(rest) < 2 or rest[1] != MOUNT_SOURCE:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[4])  # \040 is a space
        if point.startswith(prefix):
            found.append(Path(point))
    return found


def remove(root: Path, *, mounted: bool | None = None) -> None:
    """Remove a workspace's directory, unmounting its tmpfs first (``mounted`` None: look it up)."""
    files = root / "files"
    if mounted is None:
        mounted = files in workspace_mounts(root)
    if mounted:
        subprocess.run(["umount", "-l", str(files)], capture_output=True, check=False)
    shutil.rmtree(root, ignore_errors=True)


def is_stale(root: Path, sandbox_gone: Callable[[Path], bool]) -> bool:
    """Whether a workspace directory's owner is gone. One without an owner file (made by an older
    version, or an ``open`` under way) is stale only when its sandbox is gone (``sandbox_gone`` of the
    sandbox's directory)."""
    try:
        return not _owner_alive((root / OWNER_FILE).read_text())
    except FileNotFoundError:
        return sandbox_gone(root.parent.parent)
    except OSError:
        return False


def collect_stale(sandboxes_root: Path, sandbox_gone: Callable[[Path], bool]) -> list[tuple[Path, bool]]:
    """Unmount and remove the workspaces under ``sandboxes_root`` (every sandbox's ``workspaces/``, and
    tmpfs still mounted where a sandbox's directory was removed) whose owner is gone (see
    :func:`is_stale`): ``(root, was mounted)`` for each."""
    mounts = {p.parent for p in workspace_mounts(sandboxes_root) if p.name == "files"}
    roots = set(mounts)
    if sandboxes_root.is_dir():
        for base in sandboxes_root.glob("*/workspaces"):
            roots.update(p for p in base.iterdir() if p.is_dir())
    out = []
    for root in sorted(roots):
        if is_stale(root, sandbox_gone):
            remove(root, mounted=root in mounts)
            out.append((root, root in mounts))
    return out


def _mount_tmpfs(path: Path, size: int, uid: int) -> bool:
    """Mount a tmpfs of ``size`` bytes owned by ``uid`` on ``path`` (root only); False when refused."""
    opts = f"size={size},nr_inodes=20000,mode=0700,uid={uid},gid={uid},nosuid,nodev"
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", opts, MOUNT_SOURCE, str(path)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0
