"""containers/slim_site_packages.py on a made-up environment: what goes, what stays, and what is never stripped.
(On the real data environment: tests/steps/prep/test_prep_samples.py, which runs prep in it.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.scripts import load_script

slim_site_packages = load_script("containers/slim_site_packages.py", "slim_site_packages")

GONE = [
    "numpy/_core/tests/test_api.py",
    "numpy/_core/include/numpy/ndarraytypes.h",
    "pyarrow/tests/test_table.py",
    "pyarrow/include/arrow/api.h",
    "pyarrow/lib.pyx",
    "pyarrow/libarrow_flight.so.2600",
    "pyarrow/libarrow_python_flight.so",
    "pyarrow/_flight.cpython-311-x86_64-linux-gnu.so",
    "pyarrow/flight.py",
    "pyarrow/__pycache__/flight.cpython-311.pyc",
    "pyarrow/libarrow_s3.so.2600",
    "pyarrow/_s3fs.cpython-311-x86_64-linux-gnu.so",
    "pyarrow/_pyarrow_cpp_tests.cpython-311-x86_64-linux-gnu.so",
    "torch/include/ATen/ATen.h",
    "torch/include/torch/csrc/api/include/torch/data",  # a header without a suffix: its folder goes
    "torch/test/List_test",
    "torch/bin/test_api",
    "torch/bin/TCPStoreTest",
    "torch/bin/protoc",
    "torch/bin/protoc-3.13.0.0",
    "tensorflow/include/Eigen/Core",
]
KEPT = [
    "numpy/__init__.py",
    "numpy/testing/__init__.py",  # imported at run time by some packages: not a test suite
    "numpy.libs/libscipy_openblas64_-32a4b2a6.so",
    "pyarrow/__init__.py",
    "pyarrow/fs.py",
    "pyarrow/__pycache__/fs.cpython-311.pyc",
    "pyarrow/libarrow.so.2600",
    "pyarrow/libarrow_substrait.so.2600",  # linked by libarrow_python
    "pyarrow/_fs.cpython-311-x86_64-linux-gnu.so",
    "pyarrow-26.0.1.dist-info/RECORD",
    "torch/testing/__init__.py",  # torch.testing: an API, not a test suite
    "torch/bin/torch_shm_manager",  # started by torch.multiprocessing
    "torch/lib/libtorch_cpu.so",
    "tensorflow/_api/v2/test/__init__.py",  # tf.test: a folder named test that is an API
    "tensorflow/libtensorflow_cc.so.2",
    # CUDA wheels and Triton are left whole: headers their JIT compilers read, libraries nothing here can run.
    "nvidia/cu13/include/cuda_runtime.h",
    "nvidia/cudnn/lib/libcudnn.so.9",
    "triton/backends/nvidia/include/cuda.h",
    "triton/_C/libtriton.so",
]


@pytest.fixture
def site(tmp_path: Path) -> Path:
    for relpath in GONE + KEPT:
        (tmp_path / relpath).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relpath).write_bytes(b"x" * 100)
    return tmp_path


def test_what_goes_and_what_stays(site: Path) -> None:
    removed = slim_site_packages.slim(site, strip=False)
    assert removed == {"tests, sources, unused pyarrow parts": 100 * len(GONE)}
    assert [p for p in GONE if (site / p).exists()] == []
    assert [p for p in KEPT if not (site / p).exists()] == []


def test_vendored_libraries_are_never_stripped(site: Path) -> None:
    slim_site_packages.slim(site, strip=False)
    stripped = {p.relative_to(site).as_posix() for p in slim_site_packages.strippable(site)}
    assert stripped == {
        "pyarrow/libarrow.so.2600",
        "pyarrow/libarrow_substrait.so.2600",
        "pyarrow/_fs.cpython-311-x86_64-linux-gnu.so",
        "torch/lib/libtorch_cpu.so",
        "tensorflow/libtensorflow_cc.so.2",
    }


@pytest.mark.skipif(shutil.which("strip") is None, reason="binutils' strip is not installed")
def test_strip_leaves_a_loadable_library_smaller(tmp_path: Path) -> None:
    import pyarrow

    lib = Path(pyarrow.__file__).parent / "libarrow_acero.so.2600"
    if not lib.is_file():
        pytest.skip(f"{lib} is not installed here")
    site = tmp_path / "site"
    (site / "pyarrow").mkdir(parents=True)
    for name in ("libarrow.so.2600", "libarrow_compute.so.2600", "libarrow_acero.so.2600"):
        shutil.copy(lib.parent / name, site / "pyarrow" / name)
    before = (site / "pyarrow" / "libarrow_acero.so.2600").stat().st_size
    removed = slim_site_packages.slim(site, strip=True)
    assert removed["symbol tables"] > 0
    assert (site / "pyarrow" / "libarrow_acero.so.2600").stat().st_size < before
    # Loads in a fresh process, its dependencies (stripped too) from the same folder, as its RUNPATH says.
    load = f"import ctypes; ctypes.CDLL({str(site / 'pyarrow' / 'libarrow_acero.so.2600')!r})"
    subprocess.run([sys.executable, "-c", load], check=True, capture_output=True, timeout=60)
