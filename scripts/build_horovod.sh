#!/usr/bin/env bash
# Build (once) and install Horovod 0.28.1 into the venv, with the frameworks the venv has (PyTorch, TensorFlow:
# the test venv has both, each Horovod image one), Gloo and MPI compiled in. Idempotent:
#   1. nothing to do when the installed Horovod already has every framework the venv has;
#   2. else install the cached wheel for this (horovod, torch, tensorflow, python) combination;
#   3. else build that wheel from the PyPI sdist (~4 min on 2 cores), patching the sdist first, and cache it.
#
# Patches applied to the unpacked sdist (Horovod 0.28.1 is from 2023 and predates these toolchains):
#   * C++17 for Horovod's own targets (CMakeLists.txt, horovod/torch/CMakeLists.txt): PyTorch >= 2.1 headers
#     `#error` under C++14;
#   * C++17 for the bundled gloo (third_party/gloo/CMakeLists.txt): linking C++11 gloo with C++17 objects fails
#     with `multiple definition of gloo::rendezvous::Store::kDefaultTimeout`;
#   * the optional XLA MPI ops (horovod/tensorflow/xla_mpi_ops.cc) left out: they include XLA headers that
#     TensorFlow 2.16+ wheels no longer ship complete (`highwayhash/arch_specific.h: No such file`);
#   * horovod.tensorflow.keras takes its backend from tf.keras, not from the `keras` package: TensorFlow >= 2.16
#     installs Keras 3 as `keras`, while tf.keras is Keras 2 (tf_keras) under TF_USE_LEGACY_KERAS=1, so Horovod's
#     Keras callbacks (MetricAverageCallback...) called Keras 3's backend on Keras 2 models
#     (`module 'keras.backend' has no attribute 'constant'`).
#
# With TensorFlow in the venv, a .pth file in its site-packages sets TF_USE_LEGACY_KERAS=1 (unless already set) for
# every Python started from it: Horovod 0.28.1's TF ops fail under Keras 3 (`'Variable' object has no attribute
# 'ref'`), so tf.keras must be Keras 2 for any Horovod TF2 program, Horovod's own examples included.
#
# Env: VENV (default .venv), KFTRAIN_WHEEL_CACHE (default ~/.cache/kftrain/wheels), HOROVOD_VERSION (0.28.1),
#      KFTRAIN_HOROVOD_FORCE=1 rebuilds even when a cached wheel exists.
# Needs: MPI dev files, cmake, g++ (scripts/install_mpi.sh installs them).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
PIP="$VENV/bin/pip"
HOROVOD_VERSION="${HOROVOD_VERSION:-0.28.1}"
CACHE="${KFTRAIN_WHEEL_CACHE:-$HOME/.cache/kftrain/wheels}"

[ -x "$PY" ] || { echo "build_horovod: no venv at $VENV (run make install first)" >&2; exit 1; }

pyver() { "$PY" - "$1" <<'PYEOF'
import importlib.metadata as md, sys
try:
    print(md.version(sys.argv[1]))
except md.PackageNotFoundError:
    print("none")
PYEOF
}

# A framework counts only when it imports (someone may be installing it while this runs).
TORCH_VERSION="none"
if "$PY" -c "import torch" >/dev/null 2>&1; then
    TORCH_VERSION="$(pyver torch)"
fi
TF_VERSION="none"
if "$PY" -c "import tensorflow" >/dev/null 2>&1; then
    TF_VERSION="$(pyver tensorflow)"
    [ "$TF_VERSION" != none ] || TF_VERSION="$(pyver tensorflow-cpu)"
fi
if [ "$TORCH_VERSION" = none ] && [ "$TF_VERSION" = none ]; then
    echo "build_horovod: neither torch nor tensorflow imports in $VENV: install the framework Horovod is for first" >&2
    exit 1
fi
PY_TAG="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
# The revision of the patches below: a wheel built with older patches is not reused.
PATCH_REV=2
KEY="horovod-${HOROVOD_VERSION}-p${PATCH_REV}_torch-${TORCH_VERSION}_tf-${TF_VERSION}_${PY_TAG}"
LEGACY_KERAS_PTH="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/kftrain-tf-legacy-keras.pth"

# With TensorFlow: the venv's interpreters default to Keras 2 for tf.keras (see the header).
legacy_keras_env() {
    [ "$TF_VERSION" != none ] || return 0
    echo 'import os; os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")' >"$LEGACY_KERAS_PTH"
}
KEY_DIR="$CACHE/$KEY"

# Frameworks Horovod must have: each one the venv imports.
wanted_ok() {
    "$PY" - "$HOROVOD_VERSION" "$TORCH_VERSION" "$TF_VERSION" <<'PYEOF' >/dev/null 2>&1
import sys
import horovod
assert horovod.__version__ == sys.argv[1], horovod.__version__
if sys.argv[2] != "none":
    import horovod.torch as hvd
    assert hvd.mpi_built() and hvd.gloo_built()
if sys.argv[3] != "none":
    import os
    import horovod.tensorflow as hvdtf
    assert hvdtf.mpi_built()
    assert os.environ.get("TF_USE_LEGACY_KERAS") == "1"  # from the .pth: a fresh interpreter must have it
    import horovod.tensorflow.keras.callbacks as cb
    import inspect
    assert "from keras import backend" not in inspect.getsource(cb)  # the tf.keras backend patch
PYEOF
}

legacy_keras_env
if [ "${KFTRAIN_HOROVOD_FORCE:-0}" != 1 ] && wanted_ok; then
    echo "build_horovod: Horovod $HOROVOD_VERSION already installed with torch $TORCH_VERSION, tensorflow $TF_VERSION"
    exit 0
fi

install_wheel() {
    echo "build_horovod: installing $1"
    # --no-deps, then its runtime deps at the project's pinned versions (constraints.txt).
    "$PIP" install --quiet --disable-pip-version-check --no-deps --force-reinstall "$1"
    local constraints=()
    [ -f "$ROOT/constraints.txt" ] && constraints=(-c "$ROOT/constraints.txt")
    "$PIP" install --quiet --disable-pip-version-check "${constraints[@]}" cffi cloudpickle psutil pyyaml packaging
}

wheel="$(ls "$KEY_DIR"/horovod-"$HOROVOD_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
if [ -n "$wheel" ] && [ "${KFTRAIN_HOROVOD_FORCE:-0}" != 1 ]; then
    install_wheel "$wheel"
    wanted_ok || { echo "build_horovod: cached wheel $wheel does not import; delete $KEY_DIR and rerun" >&2; exit 1; }
    exit 0
fi

for tool in mpicxx cmake g++; do
    command -v "$tool" >/dev/null 2>&1 || { echo "build_horovod: $tool missing (run scripts/install_mpi.sh)" >&2; exit 1; }
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kftrain-horovod-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
echo "build_horovod: building $KEY in $WORK"
"$PIP" download --quiet --disable-pip-version-check --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$WORK"
tar -xzf "$WORK/horovod-$HOROVOD_VERSION.tar.gz" -C "$WORK"
SRC="$WORK/horovod-$HOROVOD_VERSION"

# --- patches (each checked, so a changed sdist fails loudly instead of building something else) ---
patch_file() {  # file, python-regex, replacement
    "$PY" - "$@" <<'PYEOF'
import re, sys
path, pattern, repl = sys.argv[1:4]
text = open(path).read()
new, n = re.subn(pattern, repl, text)
if n == 0:
    sys.exit(f"build_horovod: patch target not found in {path}: {pattern}")
open(path, "w").write(new)
PYEOF
}
patch_file "$SRC/CMakeLists.txt" 'set\(CMAKE_CXX_STANDARD 14\)' 'set(CMAKE_CXX_STANDARD 17)'
patch_file "$SRC/horovod/torch/CMakeLists.txt" 'set\(CMAKE_CXX_STANDARD 14\)' 'set(CMAKE_CXX_STANDARD 17)'
patch_file "$SRC/third_party/gloo/CMakeLists.txt" '-std=c\+\+11' '-std=c++17'
patch_file "$SRC/horovod/tensorflow/CMakeLists.txt" \
    'list\(APPEND TF_SOURCES "\$\{PROJECT_SOURCE_DIR\}/horovod/tensorflow/xla_mpi_ops\.cc"\)\n' ''
for module in __init__ callbacks; do
    patch_file "$SRC/horovod/tensorflow/keras/$module.py" 'from keras import backend as K' 'K = keras.backend'
done

export HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MXNET=1
# HOROVOD_WITH_<FRAMEWORK>=1: the build must include that framework's ops (it fails rather than skip them);
# HOROVOD_WITHOUT_<FRAMEWORK>=1: it leaves them out. Which, by what the venv imports.
with_framework_if() {  # with_framework_if FRAMEWORK VERSION ("none": not in the venv)
    if [ "$2" != none ]; then
        export "HOROVOD_WITH_$1=1"
        unset "HOROVOD_WITHOUT_$1" || true
    else
        export "HOROVOD_WITHOUT_$1=1"
        unset "HOROVOD_WITH_$1" || true
    fi
}
with_framework_if PYTORCH "$TORCH_VERSION"
with_framework_if TENSORFLOW "$TF_VERSION"
export MAKEFLAGS="${MAKEFLAGS:--j$(nproc)}"

mkdir -p "$WORK/dist"
started=$SECONDS
# --no-build-isolation: the build must see the venv's torch/tensorflow (and needs setuptools, wheel, cffi there).
"$PIP" wheel --disable-pip-version-check --no-deps --no-build-isolation -w "$WORK/dist" "$SRC" \
    >"$WORK/build.log" 2>&1 || { tail -n 60 "$WORK/build.log" >&2; echo "build_horovod: build failed" >&2; exit 1; }
built="$(ls "$WORK"/dist/horovod-*.whl)"
mkdir -p "$KEY_DIR"
cp "$built" "$KEY_DIR/"
echo "build_horovod: built $(basename "$built") in $((SECONDS - started))s, cached in $KEY_DIR"
install_wheel "$KEY_DIR/$(basename "$built")"
wanted_ok || { echo "build_horovod: the installed Horovod lacks a wanted framework" >&2; exit 1; }
# Its table only: importing TensorFlow to fill it prints some 60 lines of TensorFlow/absl start-up logging.
check="$("$VENV/bin/horovodrun" --check-build 2>&1)" || { echo "$check" >&2; exit 1; }
table="$(sed -n '/^Horovod v/,$p' <<<"$check")"
echo "${table:-$check}"
