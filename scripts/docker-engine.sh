#!/usr/bin/env bash
# Makes a docker engine answer on this machine, idempotently (the image tests and `make sandbox-images`
# need one):
#   - as root with apt-get: installs Debian's docker.io (the engine) and debootstrap when missing
#   - starts dockerd in the background when `docker info` does not answer (log: $MLSANDBOX_HOME/dockerd.log)
#   - waits until the daemon answers, then prints its version
# Nothing happens when a daemon already answers (Docker Desktop, a systemd-managed engine, a remote
# DOCKER_HOST): a second run takes well under a second.
# `--stop` stops the dockerd this script started (its pid is kept in $MLSANDBOX_HOME/dockerd.pid) and
# nothing else: an engine that was already running is left as it was. `.ci/run` calls it on exit.
set -euo pipefail

MLSANDBOX_HOME="${MLSANDBOX_HOME:-$HOME/.cache/mlsandbox}"
DOCKER="${DOCKER:-docker}"
WAIT_S="${DOCKERD_WAIT_S:-60}"
LOG="$MLSANDBOX_HOME/dockerd.log"
PIDFILE="$MLSANDBOX_HOME/dockerd.pid"

say() { printf '\033[1m[docker-engine]\033[0m %s\n' "$*"; }
die() { printf '\033[31m[docker-engine] error:\033[0m %s\n' "$*" >&2; exit 1; }
answers() { "$DOCKER" info >/dev/null 2>&1; }
is_root_with_apt() { [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null 2>&1; }

apt_install() {
  # Offline first (the package lists may be fresh enough), then with an update.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null; } \
    || die "apt-get install $* failed (see above)"
}

if [[ "${1:-}" == "--stop" ]]; then
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  if [[ -n "$pid" && "$(cat "/proc/$pid/comm" 2>/dev/null)" == dockerd ]]; then
    say "stopping the dockerd started here (pid $pid)"
    kill -TERM "$pid"  # dockerd stops its containers and its containerd, then exits
    for ((i = 0; i < WAIT_S * 4; i++)); do
      [[ -d "/proc/$pid" ]] || break
      sleep 0.25
    done
    [[ ! -d "/proc/$pid" ]] || { kill -KILL "$pid" 2>/dev/null || true; say "dockerd did not stop in ${WAIT_S}s: killed"; }
  fi
  rm -f "$PIDFILE"
  exit 0
fi

# --- packages -------------------------------------------------------------------------------------
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
# docker.io recommends these; dockerd needs iptables for its bridge network, debootstrap needs wget or curl.
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
command -v wget >/dev/null 2>&1 || command -v curl >/dev/null 2>&1 || missing+=(wget)
if ((${#missing[@]})); then
  if answers && [[ " ${missing[*]} " != *" debootstrap "* ]]; then
    :  # a daemon answers and only engine packages are missing: the engine is elsewhere (remote, Desktop)
  elif is_root_with_apt; then
    say "installing ${missing[*]} (apt-get)"
    apt_install "${missing[@]}"
  else
    die "missing: ${missing[*]}. As root on Debian/Ubuntu: apt-get install docker.io debootstrap; elsewhere install Docker Engine (https://docs.docker.com/engine/install/) and debootstrap"
  fi
fi
command -v "$DOCKER" >/dev/null 2>&1 || die "no docker client ($DOCKER) on PATH: install docker.io (it brings /usr/bin/docker)"

# --- daemon ---------------------------------------------------------------------------------------
if answers; then
  say "docker engine answers ($("$DOCKER" version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
  exit 0
fi
command -v dockerd >/dev/null 2>&1 || die "the docker daemon does not answer and dockerd is not installed (as root: apt-get install docker.io)"
[[ "$(id -u)" == "0" ]] || die "the docker daemon does not answer and only root can start dockerd here: start Docker (sudo systemctl start docker, or sudo dockerd &)"
if [[ -S /var/run/docker.sock ]] && ! pgrep -x dockerd >/dev/null 2>&1; then
  rm -f /var/run/docker.sock  # left by a daemon that died; dockerd refuses to start over it
fi
if ! pgrep -x dockerd >/dev/null 2>&1; then
  mkdir -p "$MLSANDBOX_HOME"
  say "starting dockerd (log: $LOG)"
  # Detached from this shell (its own session) so that it outlives the caller, as a service would.
  setsid nohup dockerd >>"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"  # setsid execs dockerd (a background job leads no process group): this is its pid
fi
for ((i = 0; i < WAIT_S * 4; i++)); do
  answers && break
  sleep 0.25
done
answers || die "dockerd did not answer within ${WAIT_S}s; last lines of $LOG:
$(tail -n 20 "$LOG" 2>/dev/null)"
say "docker engine answers ($("$DOCKER" version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
