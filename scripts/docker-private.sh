#!/usr/bin/env bash
# A private Docker daemon for the container test (tests/test_container.py) and for poking at the image by hand
# on a host without Docker Hub. Debian's dockerd (docker.io) on its own data-root, exec-root, socket and pidfile
# under a persistent cache dir, so image layers and BuildKit caches (ccache, pip) survive between runs. No
# iptables rules and no default bridge: builds use the host network, containers run with network_mode none.
# Needs root.
#
#   scripts/docker-private.sh start              start it (or find it running); waits until it answers
#   scripts/docker-private.sh base-image         lab-base:bookworm from debootstrap (once; kept in the data-root)
#   scripts/docker-private.sh stop               stop it, unmount what dockerd leaves behind
#   eval "$(scripts/docker-private.sh env)"      point docker and docker compose at it
#
# LAB_DOCKER_DIR (default $LAB_CACHE_DIR/docker, else ~/.cache/prefill-lab/docker), LAB_BASE_IMAGE,
# LAB_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

DIR=${LAB_DOCKER_DIR:-${LAB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/prefill-lab}/docker}
DATA=$DIR/data EXEC=$DIR/exec SOCK=$DIR/docker.sock PIDFILE=$DIR/dockerd.pid LOG=$DIR/dockerd.log
BASE_IMAGE=${LAB_BASE_IMAGE:-lab-base:bookworm}
MIRROR=${LAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
export DOCKER_HOST=unix://$SOCK

die() { echo "docker-private: $*" >&2; exit 1; }

need() {
  command -v "$1" >/dev/null || die "$1 is missing: $2"
}

# our dockerd: the pidfile's process is alive (not a zombie) and its command line names our data-root
daemon_pid() {
  [[ -s $PIDFILE ]] || return 1
  local pid; pid=$(<"$PIDFILE")
  [[ -r /proc/$pid/cmdline ]] || return 1
  [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "dockerd .*--data-root $DATA " || return 1
  echo "$pid"
}

answers() { docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; }

# dockerd can leave its network namespace mount (exec-root/netns/default) behind; a killed one also its
# data-root bind mount and container overlays. Only for a stopped daemon.
unmount_leftovers() {
  local m
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" || true
  done < <(awk -v p="$DIR/" 'index($2, p) == 1 {print $2}' /proc/self/mounts | sort -r)
}

start() {
  [[ $(id -u) -eq 0 ]] || die "needs root (dockerd)"
  need dockerd "apt-get install docker.io containerd runc (scripts/system-deps.sh)"
  need docker "apt-get install docker.io (scripts/system-deps.sh)"
  # unix sockets (ours and containerd's under the exec-root) are limited to 107 bytes
  (( ${#EXEC} <= 60 )) || die "LAB_DOCKER_DIR is too long for unix socket paths: $DIR"
  mkdir -p "$DIR"
  if daemon_pid >/dev/null; then
    answers && { echo "DOCKER_HOST=$DOCKER_HOST (already running, pid $(daemon_pid))"; return; }
  else
    unmount_leftovers
    # builder GC keeps the BuildKit cache (old layers after code changes, ccache, pip) bounded
    printf '{"builder": {"gc": {"enabled": true, "defaultKeepStorage": "%s"}}}\n' \
      "${LAB_DOCKER_KEEP_STORAGE:-10GB}" >"$DIR/daemon.json"
    [[ -f $LOG ]] && mv -f "$LOG" "$LOG.1"  # this start's log and the previous one
    setsid dockerd --data-root "$DATA" --exec-root "$EXEC" --host "$DOCKER_HOST" --pidfile "$PIDFILE" \
      --config-file "$DIR/daemon.json" --iptables=false --ip-masq=false --bridge=none \
      >"$LOG" 2>&1 </dev/null &
  fi
  for _ in $(seq 120); do
    answers && { echo "DOCKER_HOST=$DOCKER_HOST (pid $(daemon_pid))"; return; }
    sleep 0.5
  done
  tail -n 30 "$LOG" >&2
  die "dockerd did not answer on $SOCK within 60 s (log: $LOG)"
}

stop() {
  local pid
  if pid=$(daemon_pid); then
    kill -TERM "$pid"
    for _ in $(seq 60); do daemon_pid >/dev/null || break; sleep 0.5; done
    if daemon_pid >/dev/null; then
      echo "docker-private: dockerd $pid ignored SIGTERM for 30 s, killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
      sleep 1
    fi
  fi
  unmount_leftovers
  echo "stopped (data kept in $DATA)"
}

ROOTFS=""
# a failed debootstrap can leave proc/sys mounted inside the rootfs: unmount before removing anything
drop_rootfs() {
  [[ -n $ROOTFS && -d $ROOTFS ]] || return 0
  local m
  while read -r m; do umount -l "$m" || true; done \
    < <(awk -v p="$ROOTFS/" 'index($2, p) == 1 {print $2}' /proc/self/mounts | sort -r)
  rm -rf --one-file-system "$ROOTFS"
}

base_image() {
  answers || die "the daemon is not running: $0 start"
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    echo "$BASE_IMAGE exists"
    return
  fi
  need debootstrap "apt-get install debootstrap (scripts/system-deps.sh)"
  ROOTFS=$(mktemp -d "$DIR/rootfs.XXXXXX")
  trap drop_rootfs EXIT
  echo "debootstrap --variant=minbase bookworm from $MIRROR (about 30 s)"
  debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR" >"$DIR/debootstrap.log" 2>&1 \
    || { tail -n 20 "$DIR/debootstrap.log" >&2; die "debootstrap failed (log: $DIR/debootstrap.log)"; }
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
  tar -C "$ROOTFS" -c . | docker import --change 'CMD ["bash"]' - "$BASE_IMAGE" >/dev/null
  echo "$BASE_IMAGE imported"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  base-image) base_image ;;
  env) echo "export DOCKER_HOST=$DOCKER_HOST" ;;
  *) echo "usage: $0 start|stop|base-image|env" >&2; exit 2 ;;
esac
