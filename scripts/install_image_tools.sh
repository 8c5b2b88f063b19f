#!/usr/bin/env bash
# Install the tools `make images` builds and runs images with, from Debian: buildah (builds), podman (runs,
# through runc), mmdebstrap (the base image), skopeo, fuse-overlayfs, catatonit. No Docker engine is needed.
# Idempotent: does nothing when every tool is already on PATH. Needs root (or sudo) for apt.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need=()
for tool in podman buildah runc mmdebstrap skopeo fuse-overlayfs catatonit; do
    command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
if [ ${#need[@]} -eq 0 ]; then
    echo "install_image_tools: present: $(buildah --version), $(podman --version), $(runc --version | head -n1)"
    exit 0
fi
# apt may be busy with another install on the same machine: wait for its lock rather than fail (APT_CONFIG names
# a main config file read after /etc/apt/apt.conf.d, which stays as it is).
apt_conf="$(mktemp)"
trap 'rm -f "$apt_conf"' EXIT
echo 'DPkg::Lock::Timeout "600";' >"$apt_conf"
APT_CONFIG="$apt_conf" apt_install install_image_tools 1 \
    "missing ${need[*]} and no apt-get here; install buildah, podman and mmdebstrap by hand" \
    "need root to apt-get install ${need[*]}" \
    "${need[@]}"
echo "install_image_tools: $(buildah --version), $(podman --version), $(runc --version | head -n1)"
