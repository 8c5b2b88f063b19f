#!/usr/bin/env bash
# Builds the Kubeflow operators the controlplane tests run against, each from the Go module folder of its name
# beside this script (NAME/go.mod: one `tool` line naming the operator's main package, and the operator's module
# required at its release, so every dependency is at the version the release's own go.mod names).
#
#   bash testbed/controlplane/operators/build.sh [NAME...]            build if needed (default: all)
#   bash testbed/controlplane/operators/build.sh --bin-dir [NAME...]  print "NAME FOLDER" lines, build nothing
#
# Each operator's binary goes to $KFTRAIN_CONTROLPLANE_CACHE/operators/<key>/bin/NAME, and the release's CRDs and
# webhook manifests to <key>/share/ (their paths in the module) (default cache:
# ~/.cache/kftrain/controlplane), never into the repository. The key names the operator, its release and the
# platform, and hashes its go.mod, go.sum and this script: changing one operator's pin rebuilds that one only,
# and an unchanged checkout finds its binaries and does nothing. They are modules of their own, apart from the
# control plane's (../go.mod), because each release pins its own k8s.io libraries (v0.31 to v0.36) and one module
# would move them all to the newest.
# Needs Go and the module proxy; no C compiler (CGO_ENABLED=0, as the releases' Dockerfiles build them).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${KFTRAIN_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kftrain/controlplane}/operators"
platform="$(uname -s | tr '[:upper:]' '[:lower:]')-$(uname -m)"
all=()
for d in "$here"/*/; do [[ -f "$d/go.mod" ]] && all+=("$(basename "$d")"); done

# The main package (go.mod's tool line) and the release of the module that holds it, read from go.mod so that
# --bin-dir needs no Go toolchain.
tool_package() { awk '$1 == "tool" && NF == 2 { print $2; exit }' "$here/$1/go.mod"; }
release_line() {
    local pkg="$2"
    awk -v pkg="$pkg" '$2 ~ /^v/ && (pkg == $1 || index(pkg, $1 "/") == 1) { print length($1), $1, $2 }' \
        "$here/$1/go.mod" | sort -rn | awk 'NR == 1'
}
release() { release_line "$1" "$2" | awk '{ print $3 }'; }
release_module() { release_line "$1" "$2" | awk '{ print $2 }'; }
out_dir() {
    local name="$1" version digest
    version="$(release "$name" "$(tool_package "$name")")"
    digest="$(cat "$here/$name/go.mod" "$here/$name/go.sum" "$here/build.sh" | sha256sum | cut -c1-12)"
    echo "$cache_root/${name}-${version}_${platform}_${digest}"
}

# What each release stamps into its binary, as its own Makefile does (the commit is not in the module zip).
version_flags() {
    local name="$1" version="$2"
    case "$name" in
        # kubeflow/mpi-operator@v0.8.2:Makefile, LD_FLAGS_V2
        mpi-operator) echo "-X github.com/kubeflow/mpi-operator/pkg/version.Version=$version" ;;
        # kubernetes-sigs/jobset@v0.12.0:Makefile, LD_FLAGS
        jobset) echo "-X sigs.k8s.io/jobset/pkg/version.GitVersion=$version" ;;
        # training-operator and trainer stamp nothing (their Dockerfiles: a plain go build).
        *) echo "" ;;
    esac
}

# The files of each release the fixture needs beside the binary, from the module the build used (paths in the module):
# its CRDs, its webhook configurations with the kustomize patches that name them, and the roles its ServiceAccount is
# bound to (testbed/controlplane/cluster.py applies those). Copied into the cache folder's share/, never into the
# repository.
release_files() {
    case "$1" in
        training-operator)
            echo manifests/base/crds/kubeflow.org_tfjobs.yaml manifests/base/crds/kubeflow.org_pytorchjobs.yaml
            echo manifests/base/webhook/manifests.yaml manifests/base/webhook/patch.yaml
            echo manifests/base/rbac/role.yaml ;;
        mpi-operator) echo manifests/base/kubeflow.org_mpijobs.yaml manifests/base/cluster-role.yaml ;;
        trainer)
            echo manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml
            echo manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml
            echo manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml
            echo manifests/base/webhook/manifests.yaml manifests/base/webhook/patch_validating.yaml
            echo manifests/base/webhook/patch_mutating.yaml manifests/base/rbac/role.yaml ;;
        jobset)
            echo config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml config/components/webhook/manifests.yaml
            echo config/components/webhook/patches/mutating-patch.yaml
            echo config/components/webhook/patches/validating-patch.yaml
            echo config/components/rbac/role.yaml config/components/rbac/leader_election_role.yaml
            echo config/components/rbac/manager_secrets_role.yaml ;;
        *) echo "" ;;
    esac
}

bin_dir_only=false
if [[ "${1:-}" == "--bin-dir" ]]; then
    bin_dir_only=true
    shift
fi
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=("${all[@]}")
for name in "${names[@]}"; do
    if [[ ! -f "$here/$name/go.mod" || "$name" == */* ]]; then
        echo "usage: $0 [--bin-dir] [NAME...], NAME one of: ${all[*]}" >&2
        exit 2
    fi
done

if $bin_dir_only; then
    for name in "${names[@]}"; do echo "$name $(out_dir "$name")/bin"; done
    exit 0
fi

build_one() {
    local name="$1" out pkg version staging began module_dir f
    out="$(out_dir "$name")"
    if [[ -f "$out/complete" && -x "$out/bin/$name" ]]; then
        echo "$name $out/bin"
        return
    fi
    mkdir -p "$cache_root"
    # One build per key at a time: a second caller waits, then finds the first one's binary.
    exec 9>"$out.lock"
    flock 9
    if [[ -f "$out/complete" && -x "$out/bin/$name" ]]; then
        echo "$name $out/bin"
        exec 9>&-
        return
    fi
    command -v go >/dev/null || { echo "build.sh: needs Go (https://go.dev/dl/), see $here/$name/go.mod" >&2; exit 1; }
    pkg="$(tool_package "$name")"
    version="$(release "$name" "$pkg")"
    staging="$(mktemp -d "$cache_root/.build.XXXXXX")"
    # shellcheck disable=SC2064  # the folder is this call's
    trap "rm -rf '$staging'" EXIT
    began=$SECONDS
    echo "build.sh: building $name $version ($pkg) into $out/bin" >&2
    (cd "$here/$name" && CGO_ENABLED=0 go build -trimpath -buildvcs=false \
        -ldflags "-s -w $(version_flags "$name" "$version")" -o "$staging/bin/$name" "$pkg")
    module_dir="$(cd "$here/$name" && go list -m -f '{{.Dir}}' "$(release_module "$name" "$pkg")")"
    for f in $(release_files "$name"); do
        mkdir -p "$staging/share/$(dirname "$f")"
        cp "$module_dir/$f" "$staging/share/$f"
    done
    {
        echo "$pkg $version"
        go version
        echo "built in $((SECONDS - began)) s"
    } >"$staging/versions.txt"
    touch "$staging/complete"
    chmod 755 "$staging"  # mktemp -d made it private
    rm -rf "$out"
    mv "$staging" "$out"
    trap - EXIT
    exec 9>&-
    echo "build.sh: built $name $version in $((SECONDS - began)) s" >&2
    echo "$name $out/bin"
}

for name in "${names[@]}"; do build_one "$name"; done
