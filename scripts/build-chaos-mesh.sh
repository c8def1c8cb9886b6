#!/usr/bin/env bash
# Builds Chaos Mesh's controller manager, chaos-daemon and chaos-daemon-helper (cdh) from their Go module,
# idempotently, into $MLSANDBOX_HOME/bin (no registry, no GitHub release downloads: the Go module proxy only).
#
# Chaos Mesh's go.mod replaces its own API module with ./api (a relative path) and pins the k8s.io
# modules, so `go install` refuses it; as for Kubernetes (scripts/install-kube-tools.sh), a throwaway
# wrapper module requires it, pins the API module to its published version and repeats the k8s.io pins.
# Its tags (v2.x) are not valid versions of a module path without /v2: the proxy serves it by
# pseudo-version only (CHAOS_MESH_GO_VERSION in versions.env, a commit of master; see the notes there).
#
# chaos-daemon links with cgo (Debian's gcc). What its upstream image adds from GitHub releases (nsexec and
# libnsenter.so, toda, tproxy, memStress, byteman) is not built here: see the README (Chaos Mesh on the real node) for what
# that leaves working.
#
#   scripts/build-chaos-mesh.sh            build the three binaries (cold: ~20-30 min on 2 cores)
#   NICE=19 scripts/build-chaos-mesh.sh    the same at the lowest CPU priority
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck disable=SC1091
source "$ROOT/versions.env"

MLSANDBOX_HOME="${MLSANDBOX_HOME:-$HOME/.cache/mlsandbox}"
BIN="$MLSANDBOX_HOME/bin"
NICE="${NICE:-0}"
mkdir -p "$BIN"

say() { printf '\033[1m[chaos-mesh]\033[0m %s\n' "$*"; }
die() { printf '\033[31m[chaos-mesh] error:\033[0m %s\n' "$*" >&2; exit 1; }

module="$CHAOS_MESH_GO_MODULE"
version="$CHAOS_MESH_GO_VERSION"
want="$module@$version api@$CHAOS_MESH_API_GO_VERSION k8s@$CHAOS_MESH_K8S_VERSION"
names=(chaos-controller-manager chaos-daemon cdh)
pkgs=(cmd/chaos-controller-manager cmd/chaos-daemon cmd/chaos-daemon-helper)

missing=0
for name in "${names[@]}"; do
  if [[ ! -x "$BIN/$name" || "$(cat "$BIN/.$name-version" 2>/dev/null || true)" != "$want" ]]; then
    missing=1
  fi
done
if [[ "$missing" == 0 ]]; then
  say "${names[*]} present ($version)"
  exit 0
fi
command -v go >/dev/null 2>&1 || die "Chaos Mesh is built with Go: install Go >= 1.25"
command -v gcc >/dev/null 2>&1 || die "chaos-daemon links with cgo: apt-get install gcc"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
go mod init mlsandbox.local/chaos-mesh >/dev/null 2>&1
go mod edit -replace "$module/api=$module/api@$CHAOS_MESH_API_GO_VERSION"
go mod edit -replace "github.com/opencontainers/runtime-spec=github.com/opencontainers/runtime-spec@$CHAOS_MESH_RUNTIME_SPEC_VERSION"
# The k8s.io pins of Chaos Mesh's own go.mod, read from the module proxy's copy of it.
info="$(go mod download -json "$module@$version")"
gomod="$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' <<<"$info")"
srcdir="$(sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$info")"
[[ -f "$gomod" && -f "$srcdir/go.sum" ]] || die "could not download $module@$version from the module proxy"
# Its go.sum: the checksums of its dependencies as Chaos Mesh recorded them (some, e.g. fx-logr, are not
# in the checksum database the proxy mirrors, so they are verified against these instead).
cp "$srcdir/go.sum" go.sum
chmod u+w go.sum
while read -r m; do
  go mod edit -replace "$m=$m@$CHAOS_MESH_K8S_VERSION"
done < <(sed -n "s#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => k8s\.io/[a-z0-9-]* v.*#\1#p" "$gomod")
go mod edit -require "$module@$version"
say "resolving the module graph of $module@$version"
GOFLAGS=-mod=mod go get "${pkgs[@]/#/$module/}" >/dev/null 2>&1 || true
mkdir out
ldflags="-s -w -X github.com/chaos-mesh/chaos-mesh/pkg/version.gitVersion=$version"
say "building ${names[*]} (cold: 20-30 minutes on 2 cores; cached after)"
started=$SECONDS
nice -n "$NICE" env CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" \
  -o out/chaos-controller-manager "$module/cmd/chaos-controller-manager" \
  || die "building chaos-controller-manager failed (see above)"
nice -n "$NICE" env CGO_ENABLED=1 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" \
  -o out/chaos-daemon "$module/cmd/chaos-daemon" || die "building chaos-daemon failed (see above)"
nice -n "$NICE" env CGO_ENABLED=1 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" \
  -o out/cdh "$module/cmd/chaos-daemon-helper" || die "building chaos-daemon-helper failed (see above)"
for name in "${names[@]}"; do
  mv "out/$name" "$BIN/$name"
  echo "$want" > "$BIN/.$name-version"
done
say "built ${names[*]} in $((SECONDS - started)) s"
