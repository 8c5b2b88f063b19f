"""Container images, pinned to this package's version (never ``:latest``), and which one each step runs in.

Each step runs in the smallest image that holds what it imports (docs/install.md, "Images", has the matrix and sizes):

- ``python-launch``: the launch steps and ``trainer_args``; kftrain with ``[s3]``, no ML framework;
- ``python-data``: data prep; kftrain with ``[data,s3]`` (pyarrow, numpy), the ``builtin:`` samples baked as
  Parquet at build time (no scikit-learn);
- ``python-pytorch-{cpu,cuda}``, ``python-tensorflow-{cpu,cuda}``: the programs, and evaluation and export of
  the models they train (a model is loaded by its own framework);
- ``python-horovod-pytorch-cpu``, ``python-horovod-tensorflow-cpu``: MPIJobs, Horovod built with that one
  framework (a Horovod PyTorch job never pulls TensorFlow, nor the reverse).

Every framework image ships its environment slimmed (``containers/slim_site_packages.py``), as the launch and
data images do.

A framework image comes in variants, and a caller names the one it wants: the CPU build of a framework is
a fraction of the CUDA build's size, and which one a job gets must never depend on how an image happened to
be built. The registry is ``KFTRAIN_IMAGE_REGISTRY`` (read when a pipeline is compiled, or when a step falls
back to a default image at run time). Standard library only: components import this.

``python -m kftrain.images`` prints the build matrix (folder, build variant, image), one line each.
"""

from __future__ import annotations

import os
import sys

from kftrain import __version__

DEFAULT_REGISTRY = "docker.io/kftrain"
LAUNCH = "python-launch"
DATA = "python-data"
PYTORCH = "python-pytorch"
TENSORFLOW = "python-tensorflow"
HOROVOD_PYTORCH = "python-horovod-pytorch"
HOROVOD_TENSORFLOW = "python-horovod-tensorflow"

CPU = "cpu"
CUDA = "cuda"
# The variants each framework image is built in (containers/<name>/Dockerfile, build argument VARIANT).
# Horovod 0.28.1 has no CUDA build here: it predates the CUDA 13 toolchain current PyTorch wheels use.
VARIANTS: dict[str, tuple[str, ...]] = {
    PYTORCH: (CPU, CUDA),
    TENSORFLOW: (CPU, CUDA),
    HOROVOD_PYTORCH: (CPU,),
    HOROVOD_TENSORFLOW: (CPU,),
}


def image(name: str, variant: str | None = None, registry: str | None = None) -> str:
    """``<registry>/<name>[-<variant>]:<version>``; a framework image needs its variant, other images take none."""
    allowed = VARIANTS.get(name, ())
    if variant is None and allowed:
        raise ValueError(f"{name} is built per variant ({', '.join(allowed)}): name the one you want")
    if variant is not None and variant not in allowed:
        raise ValueError(
            f"{name} has no {variant} variant" + (f" (it has {', '.join(allowed)})" if allowed else " (it has none)")
        )
    registry = (registry or os.environ.get("KFTRAIN_IMAGE_REGISTRY") or DEFAULT_REGISTRY).rstrip("/")
    return f"{registry}/{name}{f'-{variant}' if variant else ''}:{__version__}"


def build_matrix() -> list[tuple[str, str, str]]:
    """(folder under containers/, VARIANT build argument or "", image) for every image this release has."""
    rows = [(n.removeprefix("python-"), "", image(n)) for n in (LAUNCH, DATA)]
    for name, variants in VARIANTS.items():
        rows += [(name.removeprefix("python-"), v, image(name, v)) for v in variants]
    return rows


if __name__ == "__main__":
    for folder, variant, ref in build_matrix():
        sys.stdout.write(f"{folder} {variant or '-'} {ref}\n")
