"""What a real node (:mod:`.node`) does to this machine, and how all of it is undone.

The tools it needs (and which command provides each), where it keeps its state, the snapshot of the
machine taken before it starts (iptables chains, ipsets, kernel settings, links, mounts, routing rules,
directories), its own routing and filter rules and cgroups, and :func:`teardown`, which removes everything
of one node, running or left by a dead owner.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from mlsandbox import paths
from mlsandbox.errors import BackendError, MissingToolError

from .controlplane import CLUSTER_CIDR, SERVICE_CIDR
from .node_manifests import BRIDGE, CGROUP_ROOT, CNI_BIN, CNI_NETWORK

MARKER_ENV = "MLSANDBOX_NODE"
CGROUP_BASE = Path("/sys/fs/cgroup")
CHAIN_PREFIXES = ("KUBE-", "CNI-", "MLSANDBOX-")
"""iptables chains of the node's making: kube-proxy's and kube-router's, the CNI plugins', its own."""
NODE_CHAIN = "MLSANDBOX-NODE"
ROUTE_RULE = ("priority", "900", "iif", BRIDGE, "to", SERVICE_CIDR, "unreachable")
IPSET_PREFIXES = ("kube-router-", "KUBE-", "inet6:kube-router-", "inet6:KUBE-")
KERNEL_SETTINGS = (
    # The kubelet's (it sets them unless protectKernelDefaults).
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    # kube-proxy's, the bridge plugin's and the node's.
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/ipv4/ip_forward",
)
HOST_DIRS = (
    "/run/containerd",
    "/run/containerd/s",
    "/var/lib/cni",
    "/var/lib/cni/results",
    "/var/log/containers",
    "/var/log/pods",
)
"""Directories outside the node's own that containerd, its shims, the CNI plugins or the kubelet create
when missing: removed again when they were absent at start and are empty at the end."""
_INSTALL = "run scripts/install-kube-tools.sh --with-node (as root; builds it with Go, cached after)"
_APT = "run scripts/install-kube-tools.sh --with-node as root (apt-get install {pkg})"
SYSTEM_TOOLS = {
    # command -> Debian package
    "containerd": "containerd",
    "containerd-shim-runc-v2": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "iptables": "iptables",
    "iptables-save": "iptables",
    "iptables-restore": "iptables",
    "ipset": "ipset",
    "conntrack": "conntrack",
    "umount": "mount",
    "ip": "iproute2",
    "nft": "nftables",
}
CNI_PLUGINS = ("bridge", "host-local", "portmap", "loopback")
NODE_BINARIES = ("kubelet", "kube-proxy", "kube-router", "crictl", "coredns")


QDISC_PROBES = {
    "netem": ("netem", "delay", "1ms"),
    "tbf": ("tbf", "rate", "1mbit", "burst", "32kbit", "latency", "400ms"),
}
"""The queueing disciplines Chaos Mesh's NetworkChaos uses (delay and loss: ``netem``; bandwidth: ``tbf``),
each with a qdisc that exercises it."""


def qdiscs() -> dict[str, bool]:
    """Which of :data:`QDISC_PROBES` this kernel has, each tried as the root qdisc of the loopback link
    of a network namespace of its own (``unshare --net``: it goes with the process, nothing is left on
    the host). Empty when ``unshare`` or ``tc`` is missing or no namespace can be made (unknown)."""
    if not all(shutil.which(t) for t in ("unshare", "tc")):
        return {}
    try:
        subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=15, check=True)
    except (subprocess.SubprocessError, OSError):
        return {}
    found = {}
    for name, args in QDISC_PROBES.items():
        try:
            done = subprocess.run(
                ["unshare", "--net", "tc", "qdisc", "add", "dev", "lo", "root", *args],
                capture_output=True,
                timeout=15,
                check=False,
            )
        except subprocess.TimeoutExpired:
            continue
        found[name] = done.returncode == 0
    return found


# ------------------------------------------------------------------------------------------- tools


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise MissingToolError(f"`{name}` is not installed: {_APT.format(pkg=SYSTEM_TOOLS[name])}")
    return found


def node_binary(name: str) -> Path:
    path = paths.bin_dir() / name
    if not path.is_file():
        raise MissingToolError(f"`{name}` is not installed (expected {path}): {_INSTALL}")
    return path


def check_prerequisites() -> None:
    """Raise :class:`MissingToolError` naming the first missing piece, :class:`BackendError` if not root."""
    if os.geteuid() != 0:
        raise BackendError("a real node needs root (containerd, the kubelet and iptables do)")
    for name in NODE_BINARIES:
        node_binary(name)
    for name in SYSTEM_TOOLS:
        tool(name)
    for plugin in CNI_PLUGINS:
        if not (CNI_BIN / plugin).is_file():
            raise MissingToolError(
                f"the CNI plugin {CNI_BIN / plugin} is missing: "
                + _APT.format(pkg="containernetworking-plugins")
            )


def base_dir() -> Path:
    return paths.home() / "node"


def containerd_root() -> Path:
    """containerd's root (its content store and snapshots: the imported images), kept between nodes."""
    return base_dir() / "containerd"


def runs_dir() -> Path:
    return base_dir() / "runs"


def env(root: Path) -> dict[str, str]:
    return {**os.environ, MARKER_ENV: str(root)}


# ------------------------------------------------------------------------------------------- state


def _iptables_chains() -> dict[str, dict[str, list[str]]]:
    """``{"iptables"|"ip6tables": {table: [chain, ...]}}`` as ``*-save`` lists them."""
    found: dict[str, dict[str, list[str]]] = {}
    for family in ("iptables", "ip6tables"):
        save = shutil.which(f"{family}-save")
        if save is None:
            continue
        done = subprocess.run([save], capture_output=True, text=True, check=False)
        tables: dict[str, list[str]] = {}
        table = ""
        for line in done.stdout.splitlines():
            if line.startswith("*"):
                table = line[1:]
                tables[table] = []
            elif line.startswith(":") and table:
                tables[table].append(line[1:].split()[0])
        found[family] = tables
    return found


def _ipsets() -> list[str]:
    ipset = shutil.which("ipset")
    if ipset is None:
        return []
    done = subprocess.run([ipset, "list", "-n"], capture_output=True, text=True, check=False)
    return done.stdout.split()


def _sysctls() -> dict[str, str]:
    values = {}
    for key in KERNEL_SETTINGS:
        with contextlib.suppress(OSError):
            values[key] = (Path("/proc/sys") / key).read_text().strip()
    return values


def route_rules() -> list[str]:
    """The routing rules of the node (``ip rule`` lines naming its bridge)."""
    done = subprocess.run(["ip", "rule", "show"], capture_output=True, text=True, check=False)
    return [line for line in done.stdout.splitlines() if f"iif {BRIDGE} " in line + " "]


def snapshot() -> dict[str, Any]:
    """What the node's cleanup compares against: iptables chains, ipsets, kernel settings, links, mounts."""
    return {
        "chains": _iptables_chains(),
        "ipsets": _ipsets(),
        "sysctls": _sysctls(),
        "links": sorted(psutil.net_if_addrs()),
        "mounts": sorted(m for _, m in _mounts()),
        "dirs": [d for d in HOST_DIRS if Path(d).is_dir()],
        "route rules": route_rules(),
    }


def _mounts() -> list[tuple[str, str]]:
    """(source, mount point) of every mount, from /proc/self/mountinfo (octal escapes decoded)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        parts = line.split(" - ", 1)
        fields = parts[0].split()
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        source = parts[1].split()[1] if len(parts) > 1 and len(parts[1].split()) > 1 else ""
        out.append((source, point))
    return out


# -------------------------------------------------------------------------------------------- setup


def allow_forwarding() -> None:
    """The node's own routing rule and filter rules, so that connections behave as on any node:

    - a pod's connection to the Service range that kube-proxy has not translated (a Service without
      endpoints, or not programmed yet) fails at once (an ``unreachable`` routing rule for what arrives
      from the bridge), instead of leaving the machine by the default route, where whatever answers
      would keep answering on that connection. (kube-proxy's own REJECT for a Service without endpoints
      sits in FORWARD behind kube-router's ACCEPT of policy-compliant traffic, so it never applies.)
      The same from this machine is refused in OUTPUT (chain :data:`NODE_CHAIN`);
    - the pods' traffic is accepted in FORWARD (a docker engine sets its policy to DROP), after kube-proxy's
      and kube-router's rules, which insert theirs at the top: NetworkPolicies still drop what they deny.
      (CNI's firewall plugin would accept it before them.)
    """
    present = _iptables_chains().get("iptables", {}).get("filter", [])
    rules = [f":{NODE_CHAIN} - [0:0]"] if NODE_CHAIN not in present else [f"-F {NODE_CHAIN}"]
    rules += [
        f"-A {NODE_CHAIN} -d {SERVICE_CIDR} -p tcp -j REJECT --reject-with tcp-reset",
        f"-A {NODE_CHAIN} -d {SERVICE_CIDR} -j REJECT --reject-with icmp-port-unreachable",
        f"-A {NODE_CHAIN} -s {CLUSTER_CIDR} -j ACCEPT",
        f"-A {NODE_CHAIN} -d {CLUSTER_CIDR} -j ACCEPT",
    ]
    if NODE_CHAIN not in present:
        for hook in ("FORWARD", "OUTPUT"):
            rules.append(f'-A {hook} -m comment --comment "mlsandbox node" -j {NODE_CHAIN}')
    done = subprocess.run(
        [tool("iptables-restore"), "--noflush"],
        input="*filter\n" + "\n".join(rules) + "\nCOMMIT\n",
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BackendError(f"iptables-restore could not add the node's filter rules: {done.stderr.strip()}")
    if not route_rules():
        done = subprocess.run(
            [tool("ip"), "rule", "add", *ROUTE_RULE], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise BackendError(f"ip rule add {' '.join(ROUTE_RULE)} failed: {done.stderr.strip()}")
    for key in ("net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables"):
        with contextlib.suppress(OSError):
            (Path("/proc/sys") / key).write_text("1")


def make_cgroups() -> None:
    """The node's cgroup root (the kubelet's ``cgroupRoot``) in every hierarchy; a new cpuset cgroup
    needs its CPUs and memory nodes before a task can join it.

    Its CPU weight is the kubelet's for ``kubepods`` (1024 per allocatable CPU), as if ``kubepods`` sat
    at the top of the hierarchy as on any node: with the default weight of a new cgroup (1024) every pod
    of the node together would weigh what one process of the machine weighs, and a busy machine would
    starve them (a model server's requests waiting for CPU seconds at a time)."""
    for hierarchy in CGROUP_BASE.iterdir():
        if not (hierarchy / "cgroup.procs").exists():
            continue
        path = hierarchy / CGROUP_ROOT
        path.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (path / knob).exists() and not (path / knob).read_text().strip():
                (path / knob).write_text((hierarchy / knob).read_text())
        if (path / "cpu.shares").exists():
            with contextlib.suppress(OSError):
                (path / "cpu.shares").write_text(str(1024 * (os.cpu_count() or 1)))


# ------------------------------------------------------------------------------------------ teardown


def crictl(root: Path, args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    endpoint = f"unix://{root / 'containerd' / 'containerd.sock'}"
    return subprocess.run(
        [
            str(node_binary("crictl")),
            "--runtime-endpoint",
            endpoint,
            "--image-endpoint",
            endpoint,
            "--timeout",
            "20s",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env(root),
    )


def processes(root: Path) -> list[psutil.Process]:
    """The node's processes: those carrying its marker, and containerd's shims for its socket."""
    sock = str(root / "containerd" / "containerd.sock")
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if proc.pid == os.getpid():
                continue
            if proc.environ().get(MARKER_ENV) == str(root) or sock in proc.cmdline():
                found.append(proc)
    return found


def process_name(proc: psutil.Process) -> str:
    try:
        return str(proc.name())
    except psutil.Error:
        return ""


def stop_process(proc: psutil.Process | subprocess.Popen[bytes], grace: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError, psutil.Error, OSError):
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except (subprocess.TimeoutExpired, psutil.TimeoutExpired):
            proc.kill()
            proc.wait(10)


def _cgroup_dirs() -> list[Path]:
    """The node's cgroups in every hierarchy, deepest first."""
    found = []
    if CGROUP_BASE.is_dir():
        for hierarchy in CGROUP_BASE.iterdir():
            top = hierarchy / CGROUP_ROOT
            if top.is_dir():
                found += [Path(d) for d, _, _ in os.walk(top)]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _kill_cgroups() -> int:
    killed = 0
    for _ in range(50):
        pids = set()
        for d in _cgroup_dirs():
            with contextlib.suppress(OSError, ValueError):
                pids |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
        pids.discard(os.getpid())
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.1)
    for d in _cgroup_dirs():
        for _ in range(20):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
    return killed


def _remove_chains(baseline: dict[str, dict[str, list[str]]]) -> int:
    """Remove the iptables chains named like the node's (``KUBE-*``, ``CNI-*``) that were not there at
    start, and every rule that jumps to one of them."""
    removed = 0
    for family, tables in _iptables_chains().items():
        restore = shutil.which(f"{family}-restore")
        save = shutil.which(f"{family}-save")
        if restore is None or save is None:
            continue
        rules = subprocess.run([save], capture_output=True, text=True, check=False).stdout.splitlines()
        script: list[str] = []
        for table, chains in tables.items():
            before = set(baseline.get(family, {}).get(table, []))
            new = [c for c in chains if c not in before and c.startswith(CHAIN_PREFIXES)]
            if not new:
                continue
            script.append(f"*{table}")
            in_table = False
            for line in rules:
                if line.startswith("*"):
                    in_table = line[1:] == table
                    continue
                if not in_table or not line.startswith("-A "):
                    continue
                words = line.split()
                chain = words[1]
                target = next((words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-j", "-g")), "")
                if chain not in new and target in new:
                    script.append("-D" + line[2:])
            script += [f"-F {c}" for c in new] + [f"-X {c}" for c in new] + ["COMMIT"]
            removed += len(new)
        if script:
            done = subprocess.run(
                [restore, "--noflush"],
                input="\n".join(script) + "\n",
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise BackendError(
                    f"{family}-restore could not remove the node's chains: {done.stderr.strip()}"
                )
    return removed


BUILTIN_CHAINS = ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING")


def _remove_empty_tables(baseline: dict[str, dict[str, list[str]]]) -> list[str]:
    """The iptables tables (``mangle``, ``raw``, ...) that were absent at start and are empty now (no rule,
    built-in chains only, accepting): the kubelet's and kube-proxy's canary chains made them, and with
    the nf_tables backend a table stays once made. Removed with ``nft`` (not for the legacy backend, whose
    tables are kernel modules). ``<family>/<table>`` of each one removed."""
    nft = shutil.which("nft")
    if nft is None:
        return []
    removed = []
    for family, nft_family in (("iptables", "ip"), ("ip6tables", "ip6")):
        binary, save = shutil.which(family), shutil.which(f"{family}-save")
        if binary is None or save is None or family not in baseline:
            continue
        version = subprocess.run([binary, "-V"], capture_output=True, text=True, check=False).stdout
        if "nf_tables" not in version:
            continue
        tables: dict[str, list[str]] = {}
        table = ""
        for line in subprocess.run([save], capture_output=True, text=True, check=False).stdout.splitlines():
            if line.startswith("*"):
                table = line[1:]
                tables[table] = []
            elif table and (line.startswith(":") or line.startswith("-A ")):
                tables[table].append(line)
        for table, lines in tables.items():
            if table in baseline[family]:
                continue
            empty = all(
                line.startswith(":") and line[1:].split()[0] in BUILTIN_CHAINS and line.split()[1] == "ACCEPT"
                for line in lines
            )
            if empty:
                done = subprocess.run(
                    [nft, "delete", "table", nft_family, table], capture_output=True, text=True, check=False
                )
                if done.returncode == 0:
                    removed.append(f"{family}/{table}")
    return removed


def _remove_ipsets(baseline: list[str]) -> int:
    ipset = shutil.which("ipset")
    if ipset is None:
        return 0
    new = [s for s in _ipsets() if s not in set(baseline) and s.startswith(IPSET_PREFIXES)]
    for name in new:
        subprocess.run([ipset, "destroy", name], capture_output=True, check=False)
    return len(new)


def _remove_links() -> int:
    """The bridge, the veths still attached to it, and the node's routing rule."""
    for _ in route_rules():
        subprocess.run(["ip", "rule", "del", *ROUTE_RULE], capture_output=True, check=False)
    done = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=False)
    links = json.loads(done.stdout or "[]")
    ours = [link["ifname"] for link in links if link.get("master") == BRIDGE]
    ours += [BRIDGE] if any(link["ifname"] == BRIDGE for link in links) else []
    for name in ours:
        subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)
    return len(ours)


def remove_stale_network() -> int:
    """The bridge, its veths and the routing rule when no node owns them (called under the node lock,
    after the dead nodes' teardown): what a node whose directory is gone left, so that the snapshot taken
    next does not count them as the machine's own. Links removed."""
    return _remove_links()


def _unmount_under(*dirs: Path) -> int:
    prefixes = [str(d.resolve()) for d in dirs]
    count = 0
    for _ in range(5):
        points = sorted(
            {p for _, p in _mounts() if any(p == d or p.startswith(d + "/") for d in prefixes)},
            key=len,
            reverse=True,
        )
        if not points:
            break
        for point in points:
            done = subprocess.run(["umount", "-l", point], capture_output=True, check=False)
            count += done.returncode == 0
    return count


def _restore_sysctls(before: dict[str, str]) -> list[str]:
    restored = []
    now = _sysctls()
    for key, value in before.items():
        if now.get(key) != value:
            with contextlib.suppress(OSError):
                (Path("/proc/sys") / key).write_text(value)
                restored.append(f"{key.replace('/', '.')}={value}")
    return restored


def _remove_files(root: Path, existed: list[str]) -> int:
    count = 0
    logs = Path("/var/log/containers")
    if logs.is_dir():
        for link in logs.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(str(root)):
                    link.unlink()
                    count += 1
    cache = Path("/var/lib/cni/results")
    if cache.is_dir():
        for entry in cache.glob(f"{CNI_NETWORK}-*"):
            entry.unlink(missing_ok=True)
            count += 1
    for made in sorted(set(HOST_DIRS) - set(existed), key=len, reverse=True):
        with contextlib.suppress(OSError):
            Path(made).rmdir()  # only when empty
            count += 1
    return count


def teardown(root: Path, procs: dict[str, subprocess.Popen[bytes]] | None = None) -> list[str]:
    """Remove everything of the node whose directory is ``root`` (see the module's docstring)."""
    lines: list[str] = []
    procs = dict(procs or {})
    try:
        baseline = json.loads((root / "baseline.json").read_text())
    except (OSError, ValueError):
        # Written before anything else is made: without it, nothing of the machine's was touched yet,
        # and there is nothing to tell the node's chains and sets from anybody else's.
        baseline = None
    # 1. Nothing may recreate pods or rules while they go.
    for name in ("kubelet", "kube-router", "kube-proxy"):
        if name in procs:
            stop_process(procs.pop(name))
    for proc in processes(root):
        if process_name(proc) in ("kubelet", "kube-router", "kube-proxy"):
            stop_process(proc)
    # 2. The pod sandboxes, through containerd (a dead one is started again on its own config): the CNI
    # plugins take down each pod's network (veth, address, NAT and firewall rules).
    config = root / "containerd" / "config.toml"
    sock = root / "containerd" / "containerd.sock"
    temporary = None
    if config.is_file() and shutil.which("containerd") and (paths.bin_dir() / "crictl").is_file():
        alive = any(process_name(p) == "containerd" for p in processes(root))
        if not alive:
            log = open(root / "containerd-cleanup.log", "wb")  # noqa: SIM115
            temporary = subprocess.Popen(
                ["containerd", "--config", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env(root),
                start_new_session=True,
            )
            log.close()
            for _ in range(100):
                if sock.exists() and crictl(root, ["version"], timeout=10).returncode == 0:
                    break
                time.sleep(0.1)
        pods = crictl(root, ["pods", "-q"]).stdout.split()
        if pods:
            crictl(root, ["rmp", "--force", "--all"], timeout=120)
            lines.append(f"{len(pods)} pod sandbox(es)")
    # 3. containerd, its shims, and whatever still runs in the node's cgroups.
    if "containerd" in procs:
        stop_process(procs.pop("containerd"))
    if temporary is not None:
        stop_process(temporary)
    stopped = 0
    for proc in processes(root):
        stop_process(proc, grace=5)
        stopped += 1
    killed = _kill_cgroups()
    if stopped or killed:
        lines.append(f"{stopped} leftover process(es), {killed} in the node's cgroups")
    # 4. Rules, sets, links, mounts, kernel settings, files.
    # Not `kube-proxy --cleanup` nor `kube-router --cleanup-config`: both flush every IPVS table of the
    # machine, whoever made it. The chains and sets that appeared while the node ran go by name instead.
    chains = _remove_chains(baseline["chains"]) if baseline else 0
    tables = _remove_empty_tables(baseline["chains"]) if baseline else []
    sets = _remove_ipsets(baseline["ipsets"]) if baseline else 0
    links = _remove_links()
    mounts = _unmount_under(root, containerd_root())
    restored = _restore_sysctls(baseline["sysctls"]) if baseline else []
    files = _remove_files(root, baseline["dirs"] if baseline else list(HOST_DIRS))
    if chains or sets:
        lines.append(f"{chains} iptables chain(s), {sets} ipset(s)")
    if tables:
        lines.append(f"empty iptables table(s) it made: {', '.join(tables)}")
    if links or mounts:
        lines.append(f"{links} network link(s), {mounts} mount(s)")
    if restored:
        lines.append("kernel settings restored: " + ", ".join(restored))
    if files:
        lines.append(f"{files} file(s) outside the node's directory")
    shutil.rmtree(root, ignore_errors=True)
    return lines
