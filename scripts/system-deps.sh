#!/usr/bin/env bash
# System packages the lab needs (Debian/Ubuntu). Installs only what is missing; needs root (or sudo).
set -euo pipefail

pkgs=(cmake g++ make ccache git python3-venv libssl-dev
      openssh-server openssh-client chromium)  # sshd: the SSH remote/target-host tests; chromium: report render test
# the container test (tests/test_container.py): a private dockerd and a debootstrap base image. Debian's docker.io
# only where no Docker engine is installed yet (it conflicts with docker-ce / containerd.io).
{ command -v dockerd || [[ -x /usr/sbin/dockerd || -x /usr/bin/dockerd ]]; } >/dev/null || pkgs+=(docker.io containerd runc)
pkgs+=(debootstrap iproute2)  # iproute2: the target-host test runs its sshd in a network namespace
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]})) || exit 0

if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "missing system packages: ${missing[*]} (run as root: apt-get install ${missing[*]})" >&2; exit 1
  fi
else SUDO=""; fi
echo "installing system packages: ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
