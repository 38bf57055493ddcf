#!/usr/bin/env bash
# Make a Docker engine and debootstrap available for the docker test tier, if possible.
#
# Installs Debian's docker.io (dockerd, containerd, runc, and a docker CLI with BuildKit
# built in) and debootstrap when dockerd or debootstrap is missing. It starts nothing:
# tests/docker/conftest.py starts its own dockerd and builds its own Debian base image.
#
# Idempotent, and it never fails its caller: where it cannot install (not root, not
# Debian, no network, apt locked) it says why and exits 0, and the docker tier then skips
# with its own reason. Safe to call from .ci/run as `bash .ci/docker-engine.sh`.
#
# Takes ~10-20 s on a fresh Debian 12 machine; ~0 s when both are present.

set -u

say() { printf 'docker-engine: %s\n' "$*"; }

main() {
  local missing=()
  command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  if [ "${#missing[@]}" -eq 0 ]; then
    say "dockerd and debootstrap are present; nothing to install"
    return 0
  fi

  if [ "$(id -u)" -ne 0 ]; then
    say "not root, cannot install ${missing[*]}; the docker tier will skip"
    return 0
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    say "no apt-get (not Debian?), cannot install ${missing[*]}; the docker tier will skip"
    return 0
  fi

  # debian-archive-keyring: debootstrap verifies the archive's signatures with it.
  local packages=("${missing[@]}" debian-archive-keyring ca-certificates)
  say "installing ${packages[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # 300 s: generous for ~60 MB of packages; a hung mirror must not eat CI's 90 minutes.
  if ! timeout 300 apt-get update -q; then
    say "apt-get update failed; the docker tier will skip"
    return 0
  fi
  # No recommends: docker.io recommends apparmor, needrestart and others that the tier
  # does not use and that only slow the install.
  if ! timeout 300 apt-get install -y -q --no-install-recommends "${packages[@]}"; then
    say "apt-get install ${packages[*]} failed; the docker tier will skip"
    return 0
  fi
  say "installed: dockerd=$(command -v dockerd || echo missing)" \
    "debootstrap=$(command -v debootstrap || echo missing)"
  return 0
}

main "$@" || true
exit 0
