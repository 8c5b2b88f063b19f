"""Container images, pinned to this package's version (never ``:latest``), and which one each step runs in.

Each step runs in the smallest image holding what it imports (matrix and sizes: docs/install.md, "Images"):
``python-launch`` (launch steps, ``trainer_args``), ``python-data`` (prep; samples baked as Parquet),
``python-{pytorch,tensorflow}-{cpu,cuda}`` (programs, evaluation, export) and ``python-horovod-{pytorch,tensorflow}-
cpu``, each slimmed by containers/slim_site_packages.py. A caller names the variant it wants: CPU or CUDA never
depends on how an image was built. Registry: ``KFTRAIN_IMAGE_REGISTRY``. Standard library only (components import
it); ``python -m kftrain.images`` prints the build matrix.
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
