"""A small load generator: allocate memory, burn CPU, sleep, spawn children, exit with a chosen status.

``python -m mlsandbox.workloads.burn --mem-mb 200 --cpu-seconds 1 --sleep 5 --children 2 --exit-code 3``
does, in this order: allocate and touch ``--mem-mb`` MiB (held until exit), spin until it has used
``--cpu-seconds`` of CPU, start ``--children`` sleeping child processes, sleep ``--sleep`` seconds, print
``MLSANDBOX_RESULT {json}`` when exiting 0, and exit with ``--exit-code``. Stdlib only; for tests and
for faults that need a process of a known size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

MIB = 1 << 20
PAGE = 4096


def log(message: str) -> None:
    print(message, flush=True)


def allocate(mib: int) -> list[bytearray]:
    """Allocate ``mib`` MiB in 1 MiB chunks, writing every page so the memory is really resident."""
    chunks: list[bytearray] = []
    for i in range(mib):
        chunk = bytearray(MIB)
        chunk[::PAGE] = b"\x01" * (MIB // PAGE)
        chunks.append(chunk)
        if (i + 1) % 50 == 0:
            log(f"allocated {i + 1} MiB")
    log(f"allocated {mib} MiB")
    return chunks


def spin(cpu_seconds: float) -> int:
    """Busy-loop until this process has used ``cpu_seconds`` of CPU time."""
    start = time.process_time()
    loops = 0
    while time.process_time() - start < cpu_seconds:
        sum(range(10_000))
        loops += 1
    log(f"burned {time.process_time() - start:.2f} CPU s")
    return loops


def spawn_children(count: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    code = f"import time; time.sleep({seconds!r})"
    children = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]
    log(f"started {count} children: {[c.pid for c in children]}")
    return children


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mlsandbox.workloads.burn", description=__doc__)
    parser.add_argument("--mem-mb", type=int, default=0)
    parser.add_argument("--cpu-seconds", type=float, default=0.0)
    parser.add_argument("--children", type=int, default=0)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args(argv)

    held = allocate(args.mem_mb) if args.mem_mb else []
    if args.cpu_seconds:
        spin(args.cpu_seconds)
    children = spawn_children(args.children, args.sleep + 60) if args.children else []
    if args.sleep:
        log(f"sleeping {args.sleep} s")
        time.sleep(args.sleep)
    for child in children:
        child.kill()
        child.wait()
    if args.exit_code == 0:
        result = {"mem_mb": len(held), "cpu_seconds": args.cpu_seconds}
        print("MLSANDBOX_RESULT " + json.dumps(result), flush=True)
    else:
        print(f"exiting with status {args.exit_code}", file=sys.stderr, flush=True)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
