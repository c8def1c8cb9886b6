#!/usr/bin/env bash
# Builds a local Debian base image for the workload Dockerfiles without any registry:
# debootstrap (minbase + python3, python3-venv, ca-certificates) + `docker import`.
#
#   scripts/build-base-image.sh [--force] [TAG]      (TAG default: mlsandbox/base:bookworm)
#
# Idempotent and cached: nothing is done when TAG already exists in the engine; the debootstrap tree is kept
# under $MLSANDBOX_HOME/base/ (outside the clone) so that re-importing after `docker rmi` takes seconds.
# The host's CA bundle is copied in and pip/requests/OpenSSL are pointed at it (PIP_CERT, SSL_CERT_FILE,
# REQUESTS_CA_BUNDLE), so that pip inside the builds trusts what the host trusts (a TLS-intercepting proxy's
# CA included). Then: docker build --build-arg BASE_IMAGE=TAG ...
set -euo pipefail

MLSANDBOX_HOME="${MLSANDBOX_HOME:-$HOME/.cache/mlsandbox}"
DOCKER="${DOCKER:-docker}"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
INCLUDE="python3,python3-venv,ca-certificates"
HOST_CA="${HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
CA_IN_IMAGE=/etc/ssl/certs/ca-certificates.crt

force=0
TAG=""
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown option $arg (try --help)" >&2; exit 2 ;;
    *) TAG="$arg" ;;
  esac
done
TAG="${TAG:-mlsandbox/base:$SUITE}"

say() { printf '\033[1m[base-image]\033[0m %s\n' "$*"; }
die() { printf '\033[31m[base-image] error:\033[0m %s\n' "$*" >&2; exit 1; }

command -v "$DOCKER" >/dev/null 2>&1 || die "no docker client: run scripts/docker-engine.sh (as root) or install Docker"
"$DOCKER" info >/dev/null 2>&1 || die "the docker daemon does not answer: run scripts/docker-engine.sh (as root) or start Docker"

if ((force == 0)) && "$DOCKER" image inspect "$TAG" >/dev/null 2>&1; then
  say "$TAG present (cached; --force rebuilds it)"
  exit 0
fi

# The tree's name carries what it is made of, so a change of suite or package list makes a new one.
KEY="$(printf '%s %s %s' "$SUITE" "$MIRROR" "$INCLUDE" | sha256sum | cut -c1-12)"
TREE="$MLSANDBOX_HOME/base/$SUITE-minbase-$KEY"
started=$SECONDS
if [[ ! -f "$TREE/.mlsandbox-complete" ]]; then
  command -v debootstrap >/dev/null 2>&1 || die "debootstrap is needed: run scripts/docker-engine.sh as root (or apt-get install debootstrap)"
  [[ "$(id -u)" == "0" ]] || die "debootstrap must run as root (it creates device nodes and sets ownership)"
  mkdir -p "$MLSANDBOX_HOME/base"
  rm -rf "$TREE.part"
  say "debootstrap --variant=minbase $SUITE ($INCLUDE) into $TREE (about a minute, once)"
  debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$TREE.part" "$MIRROR" >"$MLSANDBOX_HOME/base/debootstrap.log" 2>&1 \
    || die "debootstrap failed; last lines of $MLSANDBOX_HOME/base/debootstrap.log:
$(tail -n 15 "$MLSANDBOX_HOME/base/debootstrap.log")"
  # Package caches are of no use in an image.
  rm -rf "$TREE.part"/var/cache/apt/archives/*.deb "$TREE.part"/var/lib/apt/lists/* "$TREE.part"/var/log/*.log
  touch "$TREE.part/.mlsandbox-complete"
  rm -rf "$TREE" && mv "$TREE.part" "$TREE"
else
  say "reusing the debootstrap tree $TREE"
fi

if [[ -r "$HOST_CA" ]]; then
  cp "$HOST_CA" "$TREE$CA_IN_IMAGE.host"
  # The host's bundle (a superset of Debian's on Debian hosts) replaces the image's; Debian's is kept aside.
  [[ -f "$TREE$CA_IN_IMAGE.debian" ]] || cp "$TREE$CA_IN_IMAGE" "$TREE$CA_IN_IMAGE.debian"
  cat "$TREE$CA_IN_IMAGE.debian" "$TREE$CA_IN_IMAGE.host" >"$TREE$CA_IN_IMAGE"
  rm -f "$TREE$CA_IN_IMAGE.host"
else
  say "warning: no host CA bundle at $HOST_CA: the image trusts Debian's CAs only"
fi

say "docker import -> $TAG"
tar -C "$TREE" --numeric-owner --exclude=./.mlsandbox-complete -c . \
  | "$DOCKER" import \
    --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --change "ENV LANG=C.UTF-8" \
    --change "ENV PIP_CERT=$CA_IN_IMAGE" \
    --change "ENV SSL_CERT_FILE=$CA_IN_IMAGE" \
    --change "ENV REQUESTS_CA_BUNDLE=$CA_IN_IMAGE" \
    --change 'CMD ["/bin/bash"]' \
    --message "mlsandbox base: debootstrap $SUITE minbase + $INCLUDE" \
    - "$TAG" >/dev/null
size="$("$DOCKER" image inspect "$TAG" --format '{{.Size}}')"
say "$TAG ready in $((SECONDS - started)) s ($((size / 1000000)) MB)"
