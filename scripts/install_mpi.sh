#!/usr/bin/env bash
# Install an MPI implementation (Debian's OpenMPI: mpirun + mpicxx + headers) when it is missing.
# Idempotent: does nothing when mpirun and mpicxx are already on PATH. Needs root (or sudo) for apt.
#
# Also installs what scripts/build_horovod.sh needs to compile (cmake, g++), since both run on the
# same fresh machine from `make install`.
set -euo pipefail

need=()
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
command -v mpicxx >/dev/null 2>&1 || need+=(libopenmpi-dev)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)

if [ ${#need[@]} -eq 0 ]; then
    echo "install_mpi: MPI already present: $(mpirun --version 2>/dev/null | head -n1)"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_mpi: missing ${need[*]} and no apt-get here; install OpenMPI (mpirun, mpicxx) by hand" >&2
    exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "install_mpi: need root to apt-get install ${need[*]}" >&2
        exit 1
    fi
fi

echo "install_mpi: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists only when they are absent (a fresh container) or the install fails.
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$' || true)" ]; then
    $SUDO apt-get update -qq
fi
if ! $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"; then
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
echo "install_mpi: $(mpirun --version 2>/dev/null | head -n1)"
