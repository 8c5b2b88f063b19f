#!/usr/bin/env bash
# Install an MPI implementation (Debian's OpenMPI: mpirun + mpicxx + headers) when it is missing.
# Idempotent: does nothing when mpirun and mpicxx are already on PATH. Needs root (or sudo) for apt.
#
# Also installs what scripts/build_horovod.sh needs to compile (cmake, g++), since both run on the
# same fresh machine from `make install`.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

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

apt_install install_mpi 1 \
    "missing ${need[*]} and no apt-get here; install OpenMPI (mpirun, mpicxx) by hand" \
    "need root to apt-get install ${need[*]}" \
    "${need[@]}"
echo "install_mpi: $(mpirun --version 2>/dev/null | head -n1)"
