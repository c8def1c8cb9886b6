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
"$VENV/bin/python" -m pytest "$@"
rc=$?
if [[ $rc -eq 5 ]]; then
  echo "run-tests: pytest collected no tests: failing" >&2
  exit 1
fi
# Whatever a crashed or interrupted test left behind is collected here, so the machine stays clean.
"$VENV/bin/mlsandbox" gc >/dev/null 2>&1 || true
exit $rc
