#!/usr/bin/env bash
# Installs the Kubernetes tools the chart tests need, idempotently, into $MLSANDBOX_HOME/bin:
#   - helm         (helm lint / helm template of charts/mlsandbox)
#   - kubeconform  (strict schema validation of every manifest we render or generate)
#   - kind         (only with --with-kind: the local cluster of `make sandbox-up`)
#   - etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok  (only with --with-control-plane:
#                  a real control plane for the operator and kube-backend tests, nodes and pods simulated by kwok)
#   - kubelet, kube-proxy, kubectl, coredns, kube-router, crictl  (only with --with-node: a real node on this
#                  machine, mlsandbox.backends.kube.node; as root it also installs Debian's containerd,
#                  runc, containernetworking-plugins, iptables, conntrack, ipset and nftables when missing)
# Built with `go install` at the versions pinned in versions.env (no prebuilt downloads: the Go module proxy
# is the only source this needs). The six Kubernetes binaries come from one `go build` (--with-control-plane
# and --with-node share it). A second run only compares version stamps and takes milliseconds.
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

# build_wrapped "NAME[ NAME...]" "PACKAGE[ PACKAGE...]" MODULE VERSION LDFLAGS [REPLACES...]: modules whose
# go.mod has replace directives (etcd's server, Kubernetes itself) refuse `go install`; a throwaway wrapper
# module requires them, with each replaced module pinned to its published version, and builds the
# packages from there (several at once share the compilation; each binary is named after its
# package's last path element). The stamp holds the module, version, link flags and replacements.
build_wrapped() {
  local names="$1" pkgs="$2" module="$3" version="$4" ldflags="$5"; shift 5
  local want="$module@$version${ldflags:+ $ldflags} $*" missing="" name
  for name in $names; do
    if [[ ! -x "$BIN/$name" || "$(cat "$BIN/.$name-version" 2>/dev/null || true)" != "$want" ]]; then
      missing+=" $name"
    fi
  done
  if [[ -z "$missing" ]]; then
    say "${names// /, } present ($version)"
    return 0
  fi
  command -v go >/dev/null 2>&1 || die "${names// /, } $version are built with Go: install Go >= 1.26"
  say "building ${names// /, } $version from $module (first time: minutes, 20-30 for Kubernetes on 2 cores; cached after)"
  local tmp started=$SECONDS
  tmp="$(mktemp -d)"
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" RETURN
  (
    set -e
    cd "$tmp"
    go mod init mlsandbox.local/build >/dev/null 2>&1
    for r in "$@"; do go mod edit -replace "$r"; done
    go mod edit -require "$module@$version"
    # shellcheck disable=SC2086
    GOFLAGS=-mod=mod go get $(for p in $pkgs; do echo "$p@$version"; done) >/dev/null 2>&1 || true
    mkdir out
    local target=out/
    [[ "$names" == *" "* ]] || target="out/$names"  # one package: name it (etcd's path ends in /v3)
    # shellcheck disable=SC2086
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w $ldflags" -o "$target" $pkgs
  ) || die "building ${names// /, } (from $module@$version) failed (see above)"
  for name in $names; do
    mv "$tmp/out/$name" "$BIN/$name"
    echo "$want" > "$BIN/.$name-version"
  done
  say "built ${names// /, } in $((SECONDS - started)) s"
}

# Kubernetes' go.mod replaces every staging module (k8s.io/api, k8s.io/apiserver, ...) with a local path:
# pin each to its published v0.<minor>.<patch> instead.
kube_staging_replaces() {
  local gomod
  gomod="$(cd "$(mktemp -d)" && go mod download -json "$KUBE_APISERVER_GO_MODULE@$KUBE_APISERVER_VERSION" \
    | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  [[ -f "$gomod" ]] || die "could not download $KUBE_APISERVER_GO_MODULE@$KUBE_APISERVER_VERSION's go.mod"
  sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$gomod" \
    | while read -r m; do echo "$m=$m@$KUBE_STAGING_VERSION"; done
}

# What helm's own release build sets: its version, and the Kubernetes version `helm template` and
# `helm lint` assume without a cluster (here the one manifests are validated against, not v1.20).
KUBE_MINOR="$(cut -d. -f2 <<<"$KUBERNETES_VERSION")"
HELM_LDFLAGS="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  HELM_LDFLAGS+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$KUBE_MINOR"
done

# What Kubernetes' own release build stamps into its binaries (hack/lib/version.sh), so that they report
# v1.37.2 and not v0.0.0-master: the version, its major/minor, the commit and its date (from the module
# proxy's record of the tag, which is what the build compiles).
kube_version_ldflags() {
  local info commit date major minor flags="" pkg
  info="$(cd / && go mod download -json "$KUBE_APISERVER_GO_MODULE@$KUBE_APISERVER_VERSION" \
    | sed -n 's/.*"Info": "\(.*\)".*/\1/p')"
  commit="$(sed -n 's/.*"Hash":"\([0-9a-f]*\)".*/\1/p' "$info" 2>/dev/null || true)"
  date="$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$info" 2>/dev/null || true)"
  major="$(cut -d. -f1 <<<"${KUBE_APISERVER_VERSION#v}")"
  minor="$(cut -d. -f2 <<<"$KUBE_APISERVER_VERSION")"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$KUBE_APISERVER_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean"
    [[ -z "$commit" ]] || flags+=" -X $pkg.gitCommit=$commit"
    [[ -z "$date" ]] || flags+=" -X $pkg.buildDate=$date"
  done
  echo "${flags# }"
}

# The six Kubernetes binaries of the control plane and the node, in one build (shared compilation).
KUBE_BINARIES="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl"
# The link flags and replacements are worked out once per version (they take the module proxy's
# answers) and kept beside the binaries, so that a run with everything built only compares stamps.
build_kubernetes() {
  local pkgs="" name replaces args="$BIN/.kubernetes-$KUBE_APISERVER_VERSION-$KUBE_STAGING_VERSION.args"
  for name in $KUBE_BINARIES; do pkgs+=" $KUBE_APISERVER_GO_MODULE/cmd/$name"; done
  if [[ ! -s "$args" ]]; then
    { kube_version_ldflags; kube_staging_replaces; } > "$args.part" && mv "$args.part" "$args"
  fi
  mapfile -t replaces < <(tail -n +2 "$args")
  build_wrapped "$KUBE_BINARIES" "${pkgs# }" "$KUBE_APISERVER_GO_MODULE" "$KUBE_APISERVER_VERSION" \
    "$(head -n 1 "$args")" "${replaces[@]}"
}

# Debian's container runtime and the kernel tools the node uses, installed with apt when a command is
# missing (as root); elsewhere the error names the packages.
NODE_PACKAGES=(containerd:containerd runc:runc containernetworking-plugins:/usr/lib/cni/bridge
  iptables:iptables conntrack:conntrack ipset:ipset nftables:nft)
install_node_packages() {
  local missing=() entry pkg cmd
  for entry in "${NODE_PACKAGES[@]}"; do
    pkg="${entry%%:*}" cmd="${entry#*:}"
    if [[ "$cmd" == /* ]]; then [[ -x "$cmd" ]] || missing+=("$pkg")
    else command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg"); fi
  done
  if ((${#missing[@]} == 0)); then
    say "containerd, runc, CNI plugins, iptables, conntrack, ipset, nft present"
    return 0
  fi
  [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null 2>&1 \
    || die "missing: ${missing[*]}. As root on Debian/Ubuntu: apt-get install ${missing[*]}"
  say "installing ${missing[*]} (apt-get)"
  # Waits for another apt-get holding dpkg's lock (a shared machine) instead of failing at once.
  local apt=(apt-get -o DPkg::Lock::Timeout=600 -y -q)
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
    || { "${apt[@]}" update >/dev/null && DEBIAN_FRONTEND=noninteractive "${apt[@]}" install --no-install-recommends "${missing[@]}" >/dev/null; } \
    || die "apt-get install ${missing[*]} failed (see above)"
}

install_tool helm "$HELM_GO_MODULE/cmd/helm" "$HELM_VERSION" "$HELM_LDFLAGS"
install_tool kubeconform "$KUBECONFORM_GO_MODULE/cmd/kubeconform" "$KUBECONFORM_VERSION" "-X main.version=$KUBECONFORM_VERSION"
for arg in "$@"; do
  case "$arg" in
    --with-kind) install_tool kind "$KIND_GO_MODULE" "$KIND_VERSION" "" ;;
    --with-control-plane | --with-node)
      [[ "$arg" == --with-node ]] || install_tool kwok "$KWOK_GO_MODULE/cmd/kwok" "$KWOK_VERSION" ""
      build_wrapped etcd "$ETCD_GO_MODULE" "$ETCD_GO_MODULE" "$ETCD_VERSION" ""
      build_kubernetes
      if [[ "$arg" == --with-node ]]; then
        install_node_packages
        install_tool coredns "$COREDNS_GO_MODULE" "$COREDNS_VERSION" \
          "-X $COREDNS_GO_MODULE/coremain.GitCommit=$COREDNS_VERSION"
        install_tool kube-router "$KUBE_ROUTER_GO_MODULE/cmd/kube-router" "$KUBE_ROUTER_VERSION" \
          "-X $KUBE_ROUTER_GO_MODULE/pkg/version.Version=$KUBE_ROUTER_VERSION"
        install_tool crictl "$CRI_TOOLS_GO_MODULE/cmd/crictl" "$CRI_TOOLS_VERSION" \
          "-X $CRI_TOOLS_GO_MODULE/pkg/version.Version=$CRI_TOOLS_VERSION"
      fi
      ;;
    *) die "unknown option $arg (known: --with-kind, --with-control-plane, --with-node)" ;;
  esac
done
say "ready: helm $(cut -d' ' -f1 "$BIN/.helm-version"), kubeconform $(cut -d' ' -f1 "$BIN/.kubeconform-version")"
