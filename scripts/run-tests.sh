#!/usr/bin/env bash
# Runs the test suite; pytest's "no tests collected" (exit 5) is a failure, never a silent pass.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${MLSANDBOX_VENV:-$ROOT/.venv}"
# The kube tier (tests/kube) runs against a real API server built from source, the real-node tier
# (tests/node, root only) also on a kubelet, kube-proxy, kube-router and Debian's containerd: build and
# install them first (cached; a second run takes milliseconds). The node's images are built by the tier
# itself when their inputs changed (mlsandbox.backends.kube.node_images).
if command -v go >/dev/null 2>&1; then
  tools=(--with-control-plane)
  [[ "$(id -u)" != "0" ]] || tools+=(--with-node)
  "$ROOT/scripts/install-kube-tools.sh" "${tools[@]}" || { echo "run-tests: building the Kubernetes binaries failed" >&2; exit 1; }
fi
# The static checks: the import contracts, the type checker and the documentation site's strict build (a
# failure fails the run once the tests have run, so one run reports everything).
static=0
# Harbor's own task loader (a Python 3.12+ venv made by scripts/setup.sh) checks the exported tasks.
if [[ -z "${MLSANDBOX_HARBOR_PYTHON:-}" && -x "${MLSANDBOX_HOME:-$HOME/.cache/mlsandbox}/envs/harbor/bin/python" ]]; then
  export MLSANDBOX_HARBOR_PYTHON="${MLSANDBOX_HOME:-$HOME/.cache/mlsandbox}/envs/harbor/bin/python"
fi
# mypy's cache outside the clone (a fresh clone reuses it: entries are checked against the sources' hashes).
export MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-${MLSANDBOX_HOME:-$HOME/.cache/mlsandbox}/mypy-cache}"
"$VENV/bin/lint-imports" --no-logo >/dev/null || { "$VENV/bin/lint-imports" --no-logo; echo "run-tests: import contracts broken" >&2; static=1; }
"$VENV/bin/mypy" || { echo "run-tests: the type checker found errors" >&2; static=1; }
# The documentation site, built with --strict (a broken link or anchor, a page missing from the nav, a
# generated reference page that fails): into a throwaway directory, removed after; its log shown on failure
# only (--quiet would also silence the warnings that --strict counts).
docs_site="$(mktemp -d "${TMPDIR:-/tmp}/mlsandbox-site.XXXXXX")"
NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --site-dir "$docs_site/site" >"$docs_site/log" 2>&1 \
  || { cat "$docs_site/log"; echo "run-tests: the documentation site does not build (mkdocs build --strict)" >&2; static=1; }
rm -rf "$docs_site"

# Two lanes at once (the whole suite, no arguments): most of it waits on services, pods and training jobs
# rather than computing (a load average near 1 on 2 cores when run as one process), so two pytest processes
# share the cores. Lane 1 holds every test that runs containers or a cluster (conformance, images, kube,
# node: one control plane, one real node, the docker engine) and, to even the lanes out, the long tiers
# of one sandbox each (load, sandbox faults, transfer), the agent-stack integrations and the reward-hacking
# episodes (every built-in scenario's reference solution on real services); lane 2 everything else. Then
# lane 3, alone: the tests marked `latency`, graded on an SLO (the serving scenarios' episodes), which two
# lanes sharing the cores would break. Each lane starts its own session sandbox and prefixes its lines with
# its number ([1], [2], [3]); a lane's slowest tests are listed at its end, and what failed in each lane
# again at the end of the run. MLSANDBOX_TEST_LANES=1 runs the suite as one process; with arguments (a path,
# a marker expression) pytest runs once with them.
LANE_1=(tests/conformance tests/images tests/kube tests/node tests/load tests/sandbox_faults
  tests/transfer tests/integrations tests/integration/test_reward_hacking.py)

lane() {  # NAME PYTEST-ARGS...: runs pytest, its output prefixed; writes "RC SECONDS" to $lanes/NAME
  local name=$1 started=$SECONDS
  shift
  trap 'true' INT  # outlive an interrupt (pytest gets it and tears down) to record the lane's status
  # The prefixing sed ignores Ctrl-C so that pytest, interrupted, still prints its teardown.
  "$VENV/bin/python" -m pytest -o "cache_dir=.pytest_cache/$name" --durations=15 "$@" 2>&1 \
    | (trap '' INT; sed -u "s/^/[$name] /" | tee "$lanes/$name.log")
  echo "${PIPESTATUS[0]} $((SECONDS - started))" >"$lanes/$name"
}

summary() {  # NAME: the lane's "short test summary info" and its last line (what failed, and the count)
  sed -n "/=\{3,\} short test summary info =\{3,\}/,\$p" "$lanes/$1.log" | grep -E '^\[[0-9]+\] (FAILED|ERROR|=)' \
    || tail -n 3 "$lanes/$1.log"
}

if [[ $# -eq 0 && "${MLSANDBOX_TEST_LANES:-2}" != "1" ]]; then
  lanes="$(mktemp -d "${TMPDIR:-/tmp}/mlsandbox-lanes.XXXXXX")"
  ignore=()
  for path in "${LANE_1[@]}"; do ignore+=("--ignore=$path"); done
  # Each lane in its own process group, so that an interrupt reaches every lane running and each tears
  # down its fixtures; an interrupt also stops the run before lane 3.
  interrupted=0
  set -m
  lane 1 -m "not latency" "${LANE_1[@]}" &
  one=$!
  lane 2 -m "not latency" "${ignore[@]}" &
  two=$!
  set +m
  trap 'interrupted=1; kill -INT -- "-$one" "-$two" 2>/dev/null' INT TERM
  for pid in "$one" "$two"; do
    while kill -0 "$pid" 2>/dev/null; do wait "$pid" || true; done
  done
  if [[ $interrupted -eq 0 ]]; then
    set -m
    lane 3 -m latency &
    three=$!
    set +m
    trap 'kill -INT -- "-$three" 2>/dev/null' INT TERM
    while kill -0 "$three" 2>/dev/null; do wait "$three" || true; done
  fi
  trap - INT TERM
  rc=0
  failed=()
  for name in 1 2 3; do
    # A lane interrupted before it recorded its status failed; 5 (no tests collected) is a failure.
    read -r code seconds 2>/dev/null <"$lanes/$name" || { code=1; seconds="?"; }
    [[ $code -ne 5 ]] || { echo "run-tests: lane $name collected no tests: failing" >&2; code=1; }
    echo "run-tests: lane $name: exit $code in ${seconds} s"
    [[ $code -eq 0 ]] || { rc=1; [[ ! -s "$lanes/$name.log" ]] || failed+=("$name"); }
  done
  # The lanes end at different times: what failed in each is repeated here, at the end.
  for name in "${failed[@]}"; do
    echo "run-tests: lane $name, what failed:"
    summary "$name"
  done
  rm -rf "$lanes"
else
  "$VENV/bin/python" -m pytest "$@"
  rc=$?
  if [[ $rc -eq 5 ]]; then
    echo "run-tests: pytest collected no tests: failing" >&2
    exit 1
  fi
fi
if [[ $rc -eq 0 && $static -ne 0 ]]; then
  rc=1
fi
# Whatever a crashed or interrupted test left behind is collected here, so the machine stays clean.
"$VENV/bin/mlsandbox" gc >/dev/null 2>&1 || true
exit $rc
