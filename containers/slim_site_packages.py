"""Remove from an installed Python environment what a step never loads, so its image pulls less.

    python containers/slim_site_packages.py SITE_PACKAGES [--strip]

Run by every image's build on the environment it ships (the launch and data images, each framework image), and
by P8 (bench/bench_images.py) on the environment it measures, so the figure is the image's. Standard library
only (it runs before anything is installed in some builds). What goes, and why it is safe:

- test suites (``tests`` folders of installed packages): never imported by the packages themselves (a folder
  named ``test`` can be a public API, TensorFlow's ``tf.test``: only the ones listed below go);
- C, C++ and Cython sources and headers (``*.h``, ``*.pyx``...; pyarrow's, torch's and TensorFlow's ``include``):
  only for compiling against a package (a C++ extension, a custom op, torch.compile's C++ code), which needs a
  compiler no image has (the Horovod images compile Horovod in their build stage, before this runs);
- pyarrow's optional parts kftrain never loads: Arrow Flight (RPC), pyarrow's own S3 filesystem (kftrain reads
  ``s3://`` through s3fs and fsspec; ``pyarrow.fs`` tolerates its absence) and its C++ test module. Every
  other pyarrow library is linked by ``pyarrow.lib``; none of these is;
- torch's C++ test programs (``torch/test``, ``torch/bin/test_*``, ``torch/bin/*Test``) and its protobuf
  compiler (``torch/bin/protoc*``): executables nothing in torch runs;
- with ``--strip``, the symbol tables of shared objects (``strip --strip-unneeded``: the dynamic symbols other
  libraries link against stay; torch's, TensorFlow's and pyarrow's libraries are shipped unstripped, and a C++
  stack trace then names fewer frames), except in ``<package>.libs`` folders: those are libraries auditwheel
  vendored and patchelf rewrote, which strip can corrupt (numpy's OpenBLAS then fails to load: "ELF load
  command address/offset not page-aligned").

Left whole, whatever the options: NVIDIA's CUDA wheels (``nvidia``) and Triton (``triton``), in the CUDA
variants: their headers are read at run time by the JIT compilers (NVRTC, Triton's launcher) and nothing here
can check them without a GPU.

It prints what it removed, in MB. The build then imports the step's modules, so a removal that breaks one fails
the build, and P8 imports the same modules from the slimmed folder (and tests/containers/test_framework_images.py runs
each framework image's steps' smallest case in it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE_SUFFIXES = (".h", ".hpp", ".pyx", ".pxd", ".pxi")
# (package folder, glob patterns of files or folders in it) that no kftrain step loads.
UNUSED: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "pyarrow",
        (
            "include",
            "src",
            "libarrow_flight.so*",
            "libarrow_python_flight.so*",
            "_flight.*.so",
            "flight.py",
            "libarrow_s3.so*",
            "_s3fs.*.so",
            "_pyarrow_cpp_tests.*.so",
        ),
    ),
    ("torch", ("include", "test", "bin/test_*", "bin/*Test", "bin/protoc*")),
    ("tensorflow", ("include",)),
)
# Packages left whole (see the module's docstring).
WHOLE = ("nvidia", "triton")


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())


def _remove(path: Path) -> int:
    size = _size(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    return size


def removals(site: Path) -> list[Path]:
    """What :func:`slim` removes from ``site``."""
    found: list[Path] = []
    for package in _packages(site, ".dist-info", ".libs"):
        for root, dirs, files in os.walk(package):
            if "tests" in dirs:
                dirs.remove("tests")
                found.append(Path(root) / "tests")
            found += [Path(root) / f for f in files if f.endswith(SOURCE_SUFFIXES)]
    for package, patterns in UNUSED:
        folder = site / package
        if folder.is_dir():
            matched = {p for pattern in patterns for p in folder.glob(pattern)}
            # Not again what a removed folder holds (its headers were listed above).
            found = [p for p in found if not any(m in p.parents for m in matched)] + sorted(matched)
            cache = folder / "__pycache__"
            if cache.is_dir():  # the bytecode of a removed module (flight.py)
                gone = {p.name.removesuffix(".py") for p in found if p.suffix == ".py" and p.parent == folder}
                found += [p for p in sorted(cache.iterdir()) if p.name.split(".")[0] in gone]
    return [p for p in found if p.exists() or p.is_symlink()]


def strippable(site: Path) -> list[Path]:
    """The shared objects whose symbol tables may go: every one outside the ``*.libs`` folders auditwheel made."""
    out = []
    for package in _packages(site, ".libs"):
        out += sorted(p for p in package.rglob("*.so*") if p.is_file() and not p.is_symlink() and ".so" in p.name)
    return out


def _packages(site: Path, *skipped_suffixes: str) -> list[Path]:
    """The folders of ``site`` slimming may touch: not those :data:`WHOLE` names, nor the skipped suffixes'."""
    return sorted(
        p for p in site.iterdir() if p.is_dir() and not p.name.endswith(skipped_suffixes) and p.name not in WHOLE
    )


def slim(site: Path, *, strip: bool) -> dict[str, int]:
    """Slim ``site``; the bytes removed, by what."""
    removed = {"tests, sources, unused pyarrow parts": sum(_remove(p) for p in removals(site))}
    if strip:
        if shutil.which("strip") is None:
            raise SystemExit("--strip needs binutils' strip (apt-get install binutils)")
        files = strippable(site)
        before = sum(p.stat().st_size for p in files)
        for start in range(0, len(files), 200):
            subprocess.run(["strip", "--strip-unneeded", *map(str, files[start : start + 200])], check=True)
        removed["symbol tables"] = before - sum(p.stat().st_size for p in files)
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="the site-packages folder (or pip --target folder) to slim")
    parser.add_argument("--strip", action="store_true", help="also strip shared objects' symbol tables")
    args = parser.parse_args(argv)
    if not args.site.is_dir():
        raise SystemExit(f"{args.site}: no such folder")
    for what, size in slim(args.site, strip=args.strip).items():
        print(f"slim_site_packages: {what}: {size / 1e6:.1f} MB removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
