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
# Before starting dockerd the machine's state is recorded ($MLSANDBOX_HOME/dockerd.before: iptables rules,
# chains and policies, network links, forwarding settings); `--stop` puts back what dockerd changed: its
# `docker0` bridge, its DOCKER* chains and every rule it added (jumps to them, its masquerading), the
# FORWARD policy it set to DROP, ip_forward and the bridge netfilter settings.
set -euo pipefail

MLSANDBOX_HOME="${MLSANDBOX_HOME:-$HOME/.cache/mlsandbox}"
DOCKER="${DOCKER:-docker}"
WAIT_S="${DOCKERD_WAIT_S:-60}"
LOG="$MLSANDBOX_HOME/dockerd.log"
PIDFILE="$MLSANDBOX_HOME/dockerd.pid"
BEFORE="$MLSANDBOX_HOME/dockerd.before"
SYSCTLS=(net/ipv4/ip_forward net/ipv6/conf/all/forwarding net/bridge/bridge-nf-call-iptables net/bridge/bridge-nf-call-ip6tables)

say() { printf '\033[1m[docker-engine]\033[0m %s\n' "$*"; }
die() { printf '\033[31m[docker-engine] error:\033[0m %s\n' "$*" >&2; exit 1; }
answers() { "$DOCKER" info >/dev/null 2>&1; }
is_root_with_apt() { [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null 2>&1; }

apt_install() {
  # Offline first (the package lists may be fresh enough), then with an update.
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" >/dev/null 2>&1 \
    || { apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" >/dev/null; } \
    || die "apt-get install $* failed (see above)"
}

record_machine() {
  rm -rf "$BEFORE" && mkdir -p "$BEFORE"
  local family key
  for family in iptables ip6tables; do
    if command -v "$family-save" >/dev/null 2>&1; then "$family-save" >"$BEFORE/$family" 2>/dev/null || true; fi
  done
  for key in "${SYSCTLS[@]}"; do
    if [[ -r "/proc/sys/$key" ]]; then echo "$key $(cat "/proc/sys/$key")" >>"$BEFORE/sysctls"; fi
  done
  ip -o link show 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' >"$BEFORE/links" || true
}

# An iptables-restore script that undoes dockerd's rules against the recorded ruleset: the rules that are
# new and name a DOCKER chain or docker0 (outside DOCKER chains) deleted, the new DOCKER* chains flushed and
# removed, built-in policies that changed set back.
undo_script() {
  awk -v before="$1" '
    BEGIN {
      while ((getline line < before) > 0) {
        if (line ~ /^\*/) { t = substr(line, 2) }
        else if (line ~ /^:/) { split(substr(line, 2), f, " "); had[t "/" f[1]] = 1; policy[t "/" f[1]] = f[2] }
        else if (line ~ /^-A /) { rule[t "/" line] = 1 }
      }
    }
    /^\*/ { t = substr($0, 2); order[++n] = t; next }
    /^:/ {
      split(substr($0, 2), f, " ")
      if (!((t "/" f[1]) in had) && f[1] ~ /^DOCKER/) { flush[t] = flush[t] "-F " f[1] "\n"; drop[t] = drop[t] "-X " f[1] "\n"; mine[t "/" f[1]] = 1 }
      else if (f[2] != "-") {
        # A built-in chain: its policy as recorded, or the default (ACCEPT) when its table was not there.
        was = ((t "/" f[1]) in had) ? policy[t "/" f[1]] : "ACCEPT"
        if (was != f[2]) { pol[t] = pol[t] "-P " f[1] " " was "\n" }
      }
      next
    }
    /^-A / {
      split($0, w, " ")
      if (!((t "/" $0) in rule) && !((t "/" w[2]) in mine) && ($0 ~ /DOCKER/ || $0 ~ /docker0/)) { del[t] = del[t] "-D" substr($0, 3) "\n" }
      next
    }
    END {
      for (i = 1; i <= n; i++) {
        t = order[i]
        if (del[t] flush[t] drop[t] pol[t] != "") { printf "*%s\n%s%s%s%sCOMMIT\n", t, del[t], flush[t], drop[t], pol[t] }
      }
    }'
}

restore_machine() {
  [[ -d "$BEFORE" ]] || return 0
  local family script key value link
  for family in iptables ip6tables; do
    [[ -f "$BEFORE/$family" ]] && command -v "$family-save" >/dev/null 2>&1 || continue
    script="$("$family-save" 2>/dev/null | undo_script "$BEFORE/$family")"
    if [[ -n "$script" ]]; then
      printf '%s\n' "$script" | "$family-restore" --noflush || say "$family: could not undo dockerd's rules"
    fi
  done
  # Tables dockerd made (none was there before) and left empty go too (nf_tables keeps a table once made).
  if command -v nft >/dev/null 2>&1; then
    for family in iptables ip6tables; do
      [[ -f "$BEFORE/$family" ]] && "$family" -V 2>/dev/null | grep -q nf_tables || continue
      "$family-save" 2>/dev/null | awk -v before="$BEFORE/$family" '
        BEGIN { while ((getline line < before) > 0) if (line ~ /^\*/) had[substr(line, 2)] = 1 }
        /^\*/ { t = substr($0, 2); if (!(t in had)) { seen[t] = 1; empty[t] = 1 }; next }
        /^-A / || (/^:/ && $2 != "ACCEPT") { if (t in seen) empty[t] = 0 }
        END { for (t in empty) if (empty[t]) print t }' |
        while read -r table; do nft delete table "$([[ $family == iptables ]] && echo ip || echo ip6)" "$table" || true; done
    done
  fi
  if ip link show docker0 >/dev/null 2>&1 && ! grep -qx docker0 "$BEFORE/links" 2>/dev/null; then
    ip link delete docker0 || true
  fi
  while read -r key value; do
    [[ -w "/proc/sys/$key" && "$(cat "/proc/sys/$key")" != "$value" ]] && echo "$value" >"/proc/sys/$key"
  done <"$BEFORE/sysctls" 2>/dev/null || true
  rm -rf "$BEFORE"
  say "put back what dockerd changed (its bridge, iptables chains and rules, FORWARD policy, forwarding)"
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
    restore_machine
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
  record_machine
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
