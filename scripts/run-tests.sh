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
# The static checks: the import contracts and the type checker (a failure fails the run once the tests
# have run, so one run reports everything).
static=0
# mypy's cache outside the clone (a fresh clone reuses it: entries are checked against the sources' hashes).
export MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-${MLSANDBOX_HOME:-$HOME/.cache/mlsandbox}/mypy-cache}"
"$VENV/bin/lint-imports" --no-logo >/dev/null || { "$VENV/bin/lint-imports" --no-logo; echo "run-tests: import contracts broken" >&2; static=1; }
"$VENV/bin/mypy" || { echo "run-tests: the type checker found errors" >&2; static=1; }
"$VENV/bin/python" -m pytest "$@"
rc=$?
if [[ $rc -eq 5 ]]; then
  echo "run-tests: pytest collected no tests: failing" >&2
  exit 1
fi
if [[ $rc -eq 0 && $static -ne 0 ]]; then
  rc=1
fi
# Whatever a crashed or interrupted test left behind is collected here, so the machine stays clean.
"$VENV/bin/mlsandbox" gc >/dev/null 2>&1 || true
exit $rc
