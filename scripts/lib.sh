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
