#!/usr/bin/env bash
# Builds the control plane the controlplane tests run against (etcd, kube-apiserver, kube-controller-manager, and
# kube-scheduler, kubelet, kube-proxy and CoreDNS for its node mode) from the Go modules pinned by go.mod/go.sum next to this script,
# and prints the folder holding the binaries.
#
#   bash testbed/controlplane/build.sh             build if needed, print the bin folder
#   bash testbed/controlplane/build.sh --bin-dir   print the bin folder only (no Go needed, builds nothing)
#
# The binaries go to $KFTRAIN_CONTROLPLANE_CACHE/<key>/bin (default ~/.cache/kftrain/controlplane), never into
# the repository. The key names the versions and hashes go.mod, go.sum and this script, so that changing a pin
# or a build flag builds into a new folder while an unchanged checkout finds its binaries and does nothing.
# Needs Go (go.mod's `go` line) and the module proxy; no C compiler (CGO_ENABLED=0, like the release builds).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${KFTRAIN_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kftrain/controlplane}"

# The pinned versions, read from go.mod so that --bin-dir needs no Go toolchain.
mod_version() { awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$here/go.mod"; }
kube_version="$(mod_version k8s.io/kubernetes)"
etcd_version="$(mod_version go.etcd.io/etcd/server/v3)"
if [[ -z "$kube_version" || -z "$etcd_version" ]]; then
    echo "build.sh: k8s.io/kubernetes or go.etcd.io/etcd/server/v3 is not required in $here/go.mod" >&2
    exit 1
fi
# CoreDNS is its own module, built with its own go.mod and go.sum (checked against the checksum database): its
# dependencies' versions are not kubernetes', and requiring it here would move those of every binary above.
coredns_version="v1.15.0"
platform="$(uname -s | tr '[:upper:]' '[:lower:]')-$(uname -m)"
digest="$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" | sha256sum | cut -c1-12)"
key="kubernetes-${kube_version}_etcd-${etcd_version}_${platform}_${digest}"
out="$cache_root/$key"
bin="$out/bin"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy coredns)

if [[ "${1:-}" == "--bin-dir" ]]; then
    echo "$bin"
    exit 0
elif [[ $# -gt 0 ]]; then
    echo "usage: $0 [--bin-dir]" >&2
    exit 2
fi

complete() {
    local b
    [[ -f "$out/complete" ]] || return 1
    for b in "${binaries[@]}"; do [[ -x "$bin/$b" ]] || return 1; done
}

if complete; then
    echo "$bin"
    exit 0
fi

mkdir -p "$cache_root"
# One build per key at a time: a second caller waits, then finds the first one's binaries.
exec 9>"$cache_root/$key.lock"
flock 9
if complete; then
    echo "$bin"
    exit 0
fi

command -v go >/dev/null || { echo "build.sh: needs Go (https://go.dev/dl/), see $here/go.mod" >&2; exit 1; }

staging="$(mktemp -d "$cache_root/.build.XXXXXX")"
trap 'rm -rf "$staging"' EXIT

# What `kubectl version` and /version report. Kubernetes' own build stamps these the same way
# (kubernetes@v1.36.3:hack/lib/version.sh, kube::version::ldflags); the commit is not in the module zip,
# and the tree is the tag's exactly. Without them the binaries call themselves v0.0.0-master.
minor="${kube_version#v1.}"
minor="${minor%%.*}"
version_flags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    version_flags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    version_flags+=" -X $pkg.gitTreeState=clean"
done

began=$SECONDS
echo "build.sh: building kubernetes $kube_version and etcd $etcd_version into $bin" >&2
cd "$here"
export CGO_ENABLED=0
# -s -w: no symbol table or DWARF, as in Kubernetes' release builds (about a third smaller).
go build -trimpath -buildvcs=false -ldflags "-s -w$version_flags" -o "$staging/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy
# etcd's main package is the root of its server module (go.etcd.io/etcd/server/v3@v3.6.8:main.go).
go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$staging/bin/etcd" go.etcd.io/etcd/server/v3
# CoreDNS's main package is its module root (coredns/coredns@v1.15.0:coredns.go).
GOBIN="$staging/bin" go install -trimpath -buildvcs=false -ldflags "-s -w" "github.com/coredns/coredns@$coredns_version"

{
    echo "kubernetes $kube_version"
    echo "etcd $etcd_version"
    echo "coredns $coredns_version"
    go version
    echo "built in $((SECONDS - began)) s"
} >"$staging/versions.txt"
touch "$staging/complete"
chmod 755 "$staging"  # mktemp -d made it private
rm -rf "$out"
mv "$staging" "$out"
trap - EXIT
# Cold (an empty Go module and build cache) this is the time of a fresh machine; bench P15 reports it again.
echo "build.sh: built kubernetes $kube_version and etcd $etcd_version in $((SECONDS - began)) s" >&2
echo "$bin"
