#!/usr/bin/env bash
# Sets up what mlsandbox needs, idempotently, with caches outside the checkout. Two profiles:
#   scripts/setup.sh --demo   what `make demo` needs: uv, the project (no extras) in .venv, the MinIO server
#   scripts/setup.sh          everything the test suite needs (`make setup`, `make test`): the demo's, plus
#                             the extras below, Toxiproxy, PostgreSQL, helm and kubeconform
# In detail:
#   - uv (pinned) in $MLSANDBOX_HOME/tools, used to build the project venv (.venv) from uv's cache
#   - the project into .venv; in the full profile with its dev extras
#   - the MinIO server binary in $MLSANDBOX_HOME/bin (go install at the pinned version; without Go the
#     official release binary)
#   - the rl extra (Stable-Baselines3 + PyTorch; PyPI's torch wheel brings the CUDA runtime wheels, unused
#     on a CPU: about 20 s to fetch once here, 5.2 GB installed, hard-linked from uv's cache after that)
#   - the integration extras the tests exercise: openenv, trl, ray, pettingzoo (about 580 MB more; 20 s
#     to install from uv's cache)
# A second run does no network work and takes seconds. Each step prints what it does and how long it took.
set -euo pipefail

PROFILE=full
for arg in "$@"; do
  case "$arg" in
    --demo) PROFILE=demo ;;
    --full) PROFILE=full ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) printf '[setup] error: unknown option %s (use --demo or --full)\n' "$arg" >&2; exit 2 ;;
  esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck disable=SC1091
source "$ROOT/versions.env"

MLSANDBOX_HOME="${MLSANDBOX_HOME:-$HOME/.cache/mlsandbox}"
BIN="$MLSANDBOX_HOME/bin"
TOOLS="$MLSANDBOX_HOME/tools"
VENV="${MLSANDBOX_VENV:-$ROOT/.venv}"
mkdir -p "$BIN"

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
die() { printf '\033[31m[setup] error:\033[0m %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
SETUP_T0="$(now)"
STEP_T0="$SETUP_T0"
step() { STEP_T0="$(now)"; say "$*"; }                 # a step begins (something is built or installed)
took() { say "  ... ${*:-done} in $(since "$STEP_T0")"; }  # and how long it took
say "profile: $PROFILE ($([[ $PROFILE == demo ]] && echo 'what the demo needs' || echo 'everything the tests need'))"

# --- Python ---------------------------------------------------------------------------------------
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  for cand in python3.13 python3.12 python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      PY="$(command -v "$cand")"; break
    fi
  done
fi
[[ -n "$PY" ]] || die "Python >= ${PYTHON_MIN} is required: install it (Debian: apt-get install python3 python3-venv) or set PYTHON=/path/to/python3.11"
"$PY" -c 'import venv, ensurepip' 2>/dev/null || die "$PY lacks venv/ensurepip: install it (Debian: apt-get install python3-venv)"

# --- uv (pinned) ----------------------------------------------------------------------------------
UV="$TOOLS/bin/uv"
if [[ ! -x "$UV" ]] || [[ "$("$UV" --version 2>/dev/null | awk '{print $2}')" != "$UV_VERSION" ]]; then
  step "installing uv $UV_VERSION into $TOOLS"
  "$PY" -m venv "$TOOLS"
  "$TOOLS/bin/pip" install -q --disable-pip-version-check "uv==$UV_VERSION" || die "could not install uv $UV_VERSION from the package index"
  took
fi

# --- project venv ---------------------------------------------------------------------------------
# The stamp holds the hash of what the venv was built from and its profile: a full venv serves the demo
# too; a demo venv gets the extras added when the full profile is asked for.
if [[ "$PROFILE" == demo ]]; then
  EXTRAS=""
else
  EXTRAS="[dev,rl,openenv,trl,ray,pettingzoo]"
fi
STAMP="$VENV/.mlsandbox-stamp"
WANT="$(cat pyproject.toml versions.env | sha256sum | cut -c1-16)-$("$PY" -c 'import sys; print(sys.version.split()[0])')"
read -r HAVE_HASH HAVE_PROFILE < <(cat "$STAMP" 2>/dev/null || true; echo)
if [[ -x "$VENV/bin/python" && "$HAVE_HASH" == "$WANT" && ( "$HAVE_PROFILE" == full || "$HAVE_PROFILE" == "$PROFILE" ) ]]; then
  say "venv up to date ($VENV, ${HAVE_PROFILE})"
else
  step "building the venv at $VENV: the project${EXTRAS:+ with its extras $EXTRAS} (packages come from uv's cache after the first run)"
  [[ -x "$VENV/bin/python" ]] || "$UV" venv -q --python "$PY" "$VENV"
  # Bytecode is compiled once here: every service and job process would otherwise recompile mlflow,
  # sklearn and pandas from source at each start (10+ s of CPU each when bytecode writing is off).
  VIRTUAL_ENV="$VENV" "$UV" pip install -q --compile-bytecode -e ".$EXTRAS" || die "installing the Python dependencies failed (see above)"
  echo "$WANT $PROFILE" > "$STAMP"
  took "venv ready ($(du -sh "$VENV" 2>/dev/null | cut -f1))"
fi

# --- MinIO server ---------------------------------------------------------------------------------
MINIO="$BIN/minio"
MINIO_STAMP="$BIN/.minio-version"
HAVE_MINIO="$(cat "$MINIO_STAMP" 2>/dev/null || true)"
if [[ -x "$MINIO" && ( "$HAVE_MINIO" == "$MINIO_GO_VERSION" || "$HAVE_MINIO" == "$MINIO_RELEASE" ) ]]; then
  say "minio present ($(cat "$MINIO_STAMP"))"
elif command -v go >/dev/null 2>&1; then
  step "building minio $MINIO_GO_VERSION with go install (first time: several minutes; cached after)"
  TMPBIN="$(mktemp -d)"
  ( cd "$TMPBIN" && GOBIN="$TMPBIN" CGO_ENABLED=0 go install "$MINIO_GO_MODULE@$MINIO_GO_VERSION" ) \
    || die "go install $MINIO_GO_MODULE@$MINIO_GO_VERSION failed (see above)"
  mv "$TMPBIN/minio" "$MINIO" && rmdir "$TMPBIN"
  echo "$MINIO_GO_VERSION" > "$MINIO_STAMP"
  took
elif command -v curl >/dev/null 2>&1; then
  step "Go not found: downloading the official minio release binary $MINIO_RELEASE"
  curl -fsSL -o "$MINIO.part" "$MINIO_RELEASE_URL" \
    || die "could not download $MINIO_RELEASE_URL; install Go >= 1.24 (https://go.dev/dl) or place a minio binary at $MINIO"
  chmod +x "$MINIO.part" && mv "$MINIO.part" "$MINIO"
  echo "$MINIO_RELEASE" > "$MINIO_STAMP"
  took
else
  die "the MinIO server is needed: install Go >= 1.24 (Debian: apt-get install golang) or curl, or place a minio binary at $MINIO"
fi

if [[ "$PROFILE" == demo ]]; then
  say "ready for the demo in $(since "$SETUP_T0"): $("$VENV/bin/mlsandbox" --version 2>/dev/null || echo mlsandbox), minio at $MINIO"
  say "(the test suite's extras, Toxiproxy, PostgreSQL, helm and kubeconform come with \`make setup\` or \`make test\`)"
  exit 0
fi

# --- Toxiproxy (network faults; optional: without it network faults are reported unavailable) --------
TOXIPROXY="$BIN/toxiproxy-server"
TOXIPROXY_STAMP="$BIN/.toxiproxy-version"
if [[ -x "$TOXIPROXY" && "$(cat "$TOXIPROXY_STAMP" 2>/dev/null || true)" == "$TOXIPROXY_GO_VERSION" ]]; then
  say "toxiproxy present ($TOXIPROXY_GO_VERSION)"
elif command -v go >/dev/null 2>&1; then
  step "building toxiproxy-server $TOXIPROXY_GO_VERSION with go install"
  TMPBIN="$(mktemp -d)"
  if ( cd "$TMPBIN" && GOBIN="$TMPBIN" CGO_ENABLED=0 go install "$TOXIPROXY_GO_MODULE@$TOXIPROXY_GO_VERSION" ); then
    mv "$TMPBIN/server" "$TOXIPROXY" && rmdir "$TMPBIN"
    echo "$TOXIPROXY_GO_VERSION" > "$TOXIPROXY_STAMP"
    took
  else
    rm -rf "$TMPBIN"; say "warning: toxiproxy could not be built: network faults will be unavailable"
  fi
else
  say "warning: Go not found: toxiproxy not installed, network faults will be unavailable"
fi

# --- bubblewrap (isolates an agent's own scripts in the workspace on the local backend) ---------------
if command -v bwrap >/dev/null 2>&1; then
  say "bubblewrap present ($(bwrap --version))"
elif [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null 2>&1; then
  step "installing Debian's bubblewrap (apt-get)"
  { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends bubblewrap >/dev/null \
    || { apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends bubblewrap >/dev/null; }; } \
    || die "apt-get install bubblewrap failed (see above)"
  took
else
  say "warning: bubblewrap is not installed and this is not root with apt-get: the workspace actions will be refused (as root: apt-get install -y bubblewrap)"
fi

# --- PostgreSQL server (the PostgreSQL table source; started on demand by the local backend) ----------
if ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && getent passwd postgres >/dev/null; then
  say "postgresql present ($(ls -d /usr/lib/postgresql/*/ | xargs -n1 basename | tr '\n' ' '))"
elif [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null 2>&1; then
  step "installing Debian's postgresql server (apt-get)"
  # Only the server binaries are used: each sandbox runs initdb in a directory of its own.
  { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends postgresql >/dev/null \
    || { apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends postgresql >/dev/null; }; } \
    || die "apt-get install postgresql failed (see above)"
  took
else
  say "warning: the PostgreSQL server is not installed and this is not root with apt-get: PostgreSQL sources will be unavailable (as root: apt-get install postgresql)"
fi

# --- helm and kubeconform (chart and manifest tests only; not needed to run sandboxes) ---------------
if command -v go >/dev/null 2>&1; then
  step "helm and kubeconform (the chart and manifest tests)"
  "$ROOT/scripts/install-kube-tools.sh" || die "installing helm and kubeconform failed (see above)"
  took
else
  say "warning: Go not found: helm and kubeconform not built; the chart tests need them (install Go >= 1.24)"
fi

# --- Harbor (its own task loader checks `mlsandbox export harbor`'s tasks; Harbor needs Python 3.12+) ---
# A separate venv outside the checkout, from the first Python >= 3.12 found on PATH or under pyenv.
HARBOR_ENV="$MLSANDBOX_HOME/envs/harbor"
HARBOR_PIN="$(sed -n 's/.*"\(harbor==[0-9.]*\).*/\1/p' pyproject.toml | head -n 1)"
if [[ -x "$HARBOR_ENV/bin/python" && "$(cat "$HARBOR_ENV/.mlsandbox-pin" 2>/dev/null || true)" == "$HARBOR_PIN" ]]; then
  say "harbor present ($HARBOR_PIN in $HARBOR_ENV)"
else
  PY312=""
  for cand in python3.14 python3.13 python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python; do
    exe="$(command -v "$cand" 2>/dev/null || true)"
    if [[ -n "$exe" ]] && "$exe" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
      PY312="$exe"; break
    fi
  done
  if [[ -n "$PY312" ]]; then
    step "installing $HARBOR_PIN into $HARBOR_ENV (Python $("$PY312" -c 'import sys; print(sys.version.split()[0])'))"
    rm -rf "$HARBOR_ENV"
    "$UV" venv -q --python "$PY312" "$HARBOR_ENV" \
      && VIRTUAL_ENV="$HARBOR_ENV" "$UV" pip install -q "$HARBOR_PIN" \
      || die "installing $HARBOR_PIN failed (see above)"
    echo "$HARBOR_PIN" > "$HARBOR_ENV/.mlsandbox-pin"
    took
  else
    say "warning: no Python >= 3.12 found: Harbor's task loader check of the exported tasks cannot run (install python3.12 and run make setup again)"
  fi
fi

say "ready in $(since "$SETUP_T0"): $("$VENV/bin/mlsandbox" --version 2>/dev/null || echo mlsandbox), minio at $MINIO"
