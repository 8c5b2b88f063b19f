#!/usr/bin/env bash
# Install what the control-plane fixture's node mode runs beside its kubelet, from Debian only: containerd (the
# kubelet's container runtime), runc, the CNI plugins (bridge, host-local, loopback), catatonit (the pause
# image's one file), mmdebstrap (the PyTorchJob init container's image: Debian minbase with BIND's nslookup, made
# from the Debian mirror by testbed/controlplane/node_images.py), iptables (kube-proxy's
# rules), nftables (`nft`: the node removes the tables iptables-nft created, which iptables cannot), iproute2 (the
# fixture's bridge), podman (moves the images into containerd; scripts/install_image_tools.sh installs it with the
# builders). kubelet, kube-scheduler, kube-proxy and CoreDNS are built from Go modules by
# testbed/controlplane/build.sh, not installed here.
# Pinned to the versions the node mode was proven with (Debian 12): a version apt no longer offers fails here, by
# name, rather than a different runtime being tested. Idempotent: does nothing when each is installed at its pin.
# Needs root (or sudo) for apt.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# package=upstream version (a glob apt matches against Debian's version, so a security rebuild still matches).
pins=(
    "containerd=1.6.20*"
    "runc=1.1.5*"
    "containernetworking-plugins=1.1.1*"
    "catatonit=0.1.7*"
    "mmdebstrap=1.3.5*"
    "iptables=1.8.9*"
    "nftables=1.0.6*"
    "iproute2=6.1.0*"
    "podman=4.3.1*"
)

need=()
for pin in "${pins[@]}"; do
    package="${pin%%=*}"
    want="${pin#*=}"
    have="$(dpkg-query -W -f='${Status} ${Version}' "$package" 2>/dev/null || true)"
    # shellcheck disable=SC2053  # $want is a glob on purpose
    if [[ "$have" != "install ok installed "* || "${have##* }" != $want ]]; then
        need+=("$pin")
    fi
done

report() {
    echo "install_node_tools: containerd $(containerd --version | awk '{print $3}'), $(runc --version | head -n1)," \
        "CNI plugins $(dpkg-query -W -f='${Version}' containernetworking-plugins), catatonit" \
        "$(dpkg-query -W -f='${Version}' catatonit), $(iptables --version)"
}
if [ ${#need[@]} -eq 0 ]; then
    report
    exit 0
fi
apt_conf="$(mktemp)"
trap 'rm -f "$apt_conf"' EXIT
echo 'DPkg::Lock::Timeout "600";' >"$apt_conf"
APT_CONFIG="$apt_conf" apt_install install_node_tools 1 \
    "missing ${need[*]} and no apt-get here; install containerd, runc and containernetworking-plugins by hand" \
    "need root to apt-get install ${need[*]}" \
    "${need[@]}"
# Debian's containerd package enables a system containerd.service where systemd runs; the fixture runs its own
# (its own root, state and socket), so that one is stopped and disabled.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet containerd 2>/dev/null; then
    systemctl disable --now containerd >/dev/null 2>&1 || true
fi
report
