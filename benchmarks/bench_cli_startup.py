"""Start-up time of the command line; figures printed and saved to ``.bench/cli_startup.json``.

Run: ``.venv/bin/python benchmarks/bench_cli_startup.py [--repeat N]`` (default 5).

Each command runs ``--repeat`` times as a fresh process (``python -m mlsandbox.cli.main ...``, the imports
of the ``mlsandbox`` console script); the best and the median wall times are kept. ``import mlsandbox`` alone
is the floor every command pays (the package registers its Gymnasium envs, which imports gymnasium and
numpy). The heaviest imports of ``scenarios list`` (``python -X importtime``, cumulative microseconds of
each top-level module) say where the rest goes. The goal is ``scenarios list`` under 0.5 s; on a shared,
loaded machine the figures carry the load average beside them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from machine import describe as describe_machine
from machine import summary as machine_summary

OUT = Path(__file__).resolve().parents[1] / ".bench" / "cli_startup.json"
COMMANDS: dict[str, list[str]] = {
    "import mlsandbox (floor)": ["-c", "import mlsandbox"],
    "mlsandbox --help": ["-m", "mlsandbox.cli.main", "--help"],
    "mlsandbox scenarios list --json": ["-m", "mlsandbox.cli.main", "scenarios", "list", "--json"],
    "mlsandbox tools --format openai": ["-m", "mlsandbox.cli.main", "tools", "--format", "openai"],
    "mlsandbox sandboxes --json": ["-m", "mlsandbox.cli.main", "sandboxes", "--json"],
}


def _time(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, capture_output=True)
    return time.perf_counter() - t0


def heaviest_imports(args: list[str], top: int = 12) -> list[dict[str, Any]]:
    """The modules with the largest cumulative import time (top-level entries of ``-X importtime``)."""
    res = subprocess.run(
        [sys.executable, "-X", "importtime", *args], capture_output=True, text=True, check=True
    )
    rows = []
    for line in res.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        if name.strip() and cumulative.strip().isdigit():
            rows.append({"module": name.strip(), "depth": len(name) - len(name.lstrip()),
                         "cumulative_ms": int(cumulative) / 1000})  # fmt: skip
    shallow = [r for r in rows if r["depth"] <= 3]
    return sorted(shallow, key=lambda r: -r["cumulative_ms"])[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    machine = describe_machine()
    print(machine_summary(machine))
    figures: dict[str, Any] = {}
    print(f"{'command':<36} {'best s':>8} {'median s':>9}")
    for label, args in COMMANDS.items():
        _time(args)  # warm the file cache
        times = [_time(args) for _ in range(opts.repeat)]
        figures[label] = {"best_s": round(min(times), 3), "median_s": round(statistics.median(times), 3),
                          "runs": [round(t, 3) for t in times]}  # fmt: skip
        print(f"{label:<36} {min(times):>8.3f} {statistics.median(times):>9.3f}")
    heavy = heaviest_imports(COMMANDS["mlsandbox scenarios list --json"])
    print("heaviest imports of `scenarios list` (cumulative ms):")
    for r in heavy:
        print(f"  {'  ' * (r['depth'] - 1)}{r['module']:<40} {r['cumulative_ms']:>8.1f}")
    goal = figures["mlsandbox scenarios list --json"]["best_s"]
    print(f"scenarios list: best {goal:.3f} s (goal 0.5 s: {'met' if goal < 0.5 else 'not met'})")
    OUT.parent.mkdir(exist_ok=True)
    record = {
        "machine": machine,
        "repeat": opts.repeat,
        "commands": figures,
        "heaviest_imports": heavy,
        "goal_s": 0.5,
        "goal_met": goal < 0.5,
    }
    OUT.write_text(json.dumps(record, indent=2) + "\n")
    print(f"saved {OUT}")


if __name__ == "__main__":
    main()
