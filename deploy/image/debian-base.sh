#!/usr/bin/env bash
# Makes a Debian bookworm base image (minbase, Debian's python3 and venv) from
# a debootstrap root filesystem with `<engine> import`, for hosts that reach
# Debian's archive but no container registry. Usage: debian-base.sh IMAGE [ENGINE]
set -euo pipefail
image=${1:?usage: debian-base.sh IMAGE [ENGINE]}
engine=${2:-$(command -v podman || command -v docker)}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv bookworm "$root" "$mirror" >/dev/null
# What an image does not need: package caches and lists, documentation, locales.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
    "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/log/*
find "$root"/usr/share/locale -mindepth 1 -maxdepth 1 ! -name 'en*' -exec rm -rf {} +
tar -C "$root" -c . | "$engine" import --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "$image"
