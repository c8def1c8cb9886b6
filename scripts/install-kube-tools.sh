#!/usr/bin/env bash
# Installs the Kubernetes tools the chart tests need, idempotently, into $MLSANDBOX_HOME/bin:
#   - helm         (helm lint / helm template of charts/mlsandbox)
#   - kubeconform  (strict schema validation of every manifest we render or generate)
#   - kind         (only with --with-kind: the local cluster of `make sandbox-up`)
# Built with `go install` at the versions pinned in versions.env (no prebuilt downloads: the Go module proxy
# is the only source this needs). A second run only compares version stamps and takes milliseconds.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck disable=SC1091
source "$ROOT/versions.env"

MLSANDBOX_HOME="${MLSANDBOX_HOME:-$HOME/.cache/mlsandbox}"
BIN="$MLSANDBOX_HOME/bin"
mkdir -p "$BIN"

say() { printf '\033[1m[kube-tools]\033[0m %s\n' "$*"; }
die() { printf '\033[31m[kube-tools] error:\033[0m %s\n' "$*" >&2; exit 1; }

# install NAME MODULE/PATH VERSION LDFLAGS: go install MODULE/PATH@VERSION into $BIN/NAME unless the stamp
# (version and link flags) matches.
install_tool() {
  local name="$1" pkg="$2" version="$3" ldflags="$4"
  local stamp="$BIN/.$name-version"
  local want="$version $ldflags"
  if [[ -x "$BIN/$name" && "$(cat "$stamp" 2>/dev/null || true)" == "$want" ]]; then
    say "$name present ($version)"
    return 0
  fi
  command -v go >/dev/null 2>&1 \
    || die "$name $version is built with Go: install Go >= 1.24 (Debian: apt-get install golang; or https://go.dev/dl)"
  say "building $name $version with go install (first time: a few minutes; cached after)"
  local tmp
  tmp="$(mktemp -d)"
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" RETURN
  ( cd "$tmp" && GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS=-mod=mod go install -ldflags "-s -w $ldflags" "$pkg@$version" ) \
    || die "go install $pkg@$version failed (see above)"
  mv "$tmp/$name" "$BIN/$name"
  echo "$want" > "$stamp"
}

# What helm's own release build sets: its version, and the Kubernetes version `helm template` and
# `helm lint` assume without a cluster (here the one manifests are validated against, not v1.20).
KUBE_MINOR="$(cut -d. -f2 <<<"$KUBERNETES_VERSION")"
HELM_LDFLAGS="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  HELM_LDFLAGS+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$KUBE_MINOR"
done

install_tool helm "$HELM_GO_MODULE/cmd/helm" "$HELM_VERSION" "$HELM_LDFLAGS"
install_tool kubeconform "$KUBECONFORM_GO_MODULE/cmd/kubeconform" "$KUBECONFORM_VERSION" "-X main.version=$KUBECONFORM_VERSION"
if [[ "${1:-}" == "--with-kind" ]]; then
  install_tool kind "$KIND_GO_MODULE" "$KIND_VERSION" ""
fi
say "ready: helm $("$BIN/helm" version --short 2>/dev/null), kubeconform $("$BIN/kubeconform" -v 2>/dev/null)"
