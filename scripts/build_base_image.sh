#!/usr/bin/env bash
# Make the base every Dockerfile in containers/ starts FROM, docker.io/library/python:3.11-slim-bookworm, in the
# project's image storage (scripts/lib.sh: image_env) without Docker Hub: Debian bookworm's minbase with Debian's
# Python 3.11, from the Debian mirror (mmdebstrap), and a venv at /usr/local, so that `python`, `pip` and
# site-packages are where the official image has them (Debian's own pip refuses installs outside a venv, PEP 668).
# Cached: the image carries the key of its inputs (this script, the mirrors, the versions apt's lists give its
# packages); a run whose key matches does nothing. Needs root (mmdebstrap, overlay storage).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
image_env

BASE=docker.io/library/python:3.11-slim-bookworm
PACKAGES=(python3.11 python3.11-venv ca-certificates netbase tzdata)
mirror="${KFTRAIN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security="${KFTRAIN_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
sources=("deb $mirror bookworm main" "deb $mirror bookworm-updates main" "deb $security bookworm-security main")

versions="$(apt-cache policy "${PACKAGES[@]}" 2>/dev/null | awk '/^[^ ]/ {p = $1} /Candidate:/ {print p, $2}')"
key="$({ cat "${BASH_SOURCE[0]}"; printf '%s\n' "${sources[@]}" "$versions"; } | sha256sum | cut -c1-16)"
have="$(podman image inspect --format '{{ index .Labels "org.kftrain.inputs" }}' "$BASE" 2>/dev/null || true)"
if [ "$have" = "$key" ]; then
    echo "build_base_image: $BASE is current (inputs $key)"
    exit 0
fi

start=$SECONDS
work="$(mktemp -d "$KFTRAIN_IMAGE_CACHE/.base.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mmdebstrap --quiet --variant=minbase --include="$(IFS=,; echo "${PACKAGES[*]}")" \
    --aptopt='APT::Install-Recommends "false"' bookworm "$work/rootfs.tar" "${sources[@]}"
rootfs="localhost/kftrain/debian-bookworm-minbase:$key"
podman import --quiet "$work/rootfs.tar" "$rootfs" >/dev/null
rm -f "$work/rootfs.tar"
cat >"$work/Containerfile" <<CONF
FROM $rootfs
ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
RUN python3.11 -m venv /usr/local && python -m pip --version
CONF
buildah bud --quiet --pull-never --network host --label "org.kftrain.inputs=$key" -t "$BASE" -f "$work/Containerfile" "$work"
podman untag "$rootfs"
echo "build_base_image: $BASE built in $((SECONDS - start)) s (inputs $key):" \
    "$(podman image inspect --format '{{.Size}}' "$BASE") bytes; $versions" | tr '\n' ' '
echo
