# Helpers shared by the scripts/install_*.sh scripts; sourced by them, not run on its own.

# apt_install TAG RC NO_APT NO_ROOT PKG...: apt-get install PKG... as root or through sudo. Without apt-get,
# or without root and sudo, prints "TAG: NO_APT" (or "TAG: NO_ROOT") to stderr and exits the script with RC.
# Refreshes the package lists only when they are absent (a fresh container) or the install fails.
apt_install() {
    local tag=$1 rc=$2 no_apt=$3 no_root=$4
    shift 4
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$tag: $no_apt" >&2
        exit "$rc"
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo="sudo"
        else
            echo "$tag: $no_root" >&2
            exit "$rc"
        fi
    fi
    echo "$tag: installing $*"
    export DEBIAN_FRONTEND=noninteractive
    if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$' || true)" ]; then
        $sudo apt-get update -qq
    fi
    if ! $sudo apt-get install -y -qq --no-install-recommends "$@"; then
        $sudo apt-get update -qq
        $sudo apt-get install -y -qq --no-install-recommends "$@"
    fi
}

# image_env: point podman, buildah and skopeo at the project's own image storage and settings, never the host's
# (/etc/containers and /var/lib/containers are left as they are). $KFTRAIN_IMAGE_CACHE (default
# ~/.cache/kftrain/images) holds containers.conf, storage.conf, registries.conf and the images (storage/); the
# run state (locks, mounts) is on tmpfs in /run/kftrain-images-<hash of that path> (or $XDG_RUNTIME_DIR), so a
# reboot clears it. Containers run with runc (Debian's crun 1.8 refuses hybrid cgroups), cgroupfs, host networking
# (no bridge or firewall rules on the host), and ulimits a container may set without CAP_SYS_RESOURCE. `make
# images-clean` removes it all.
image_env() {
    local cache="${KFTRAIN_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kftrain/images}"
    local run
    # One run folder per storage (a second cache, e.g. a test's, never shares the first one's locks).
    run="$(if [ "$(id -u)" -eq 0 ]; then echo /run; else echo "${XDG_RUNTIME_DIR:-/tmp}"; fi)/kftrain-images-$(
        echo "$cache" | sha256sum | cut -c1-8)"
    mkdir -p "$cache/storage" "$run/tmp"
    local mount_program=""
    [ "$(id -u)" -eq 0 ] || mount_program='mount_program = "/usr/bin/fuse-overlayfs"'
    cat >"$cache/storage.conf.new" <<CONF
[storage]
driver = "overlay"
graphroot = "$cache/storage"
runroot = "$run/storage"
[storage.options.overlay]
$mount_program
CONF
    cat >"$cache/containers.conf.new" <<CONF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
netns = "host"
log_driver = "k8s-file"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$run/tmp"
CONF
    cat >"$cache/registries.conf.new" <<CONF
unqualified-search-registries = ["docker.io"]
short-name-mode = "permissive"
CONF
    local f
    for f in storage containers registries; do
        if cmp -s "$cache/$f.conf.new" "$cache/$f.conf"; then rm "$cache/$f.conf.new"; else mv "$cache/$f.conf.new" "$cache/$f.conf"; fi
    done
    export KFTRAIN_IMAGE_CACHE="$cache" KFTRAIN_IMAGE_RUN="$run"
    export CONTAINERS_STORAGE_CONF="$cache/storage.conf" CONTAINERS_CONF="$cache/containers.conf"
    export CONTAINERS_REGISTRIES_CONF="$cache/registries.conf"
}
