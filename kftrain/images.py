"""Container images, pinned to this package's version (never ``:latest``).

The registry is ``KFTRAIN_IMAGE_REGISTRY`` (read when a pipeline is compiled, or when a step
falls back to a default image at run time). Standard library only: components import this.
"""

from __future__ import annotations

import os

from kftrain import __version__

DEFAULT_REGISTRY = "docker.io/kftrain"
RUNTIME = "python-runtime"
PYTORCH = "python-pytorch"
TENSORFLOW = "python-tensorflow"
HOROVOD = "python-horovod"


def image(name: str, registry: str | None = None) -> str:
    registry = (registry or os.environ.get("KFTRAIN_IMAGE_REGISTRY") or DEFAULT_REGISTRY).rstrip("/")
    return f"{registry}/{name}:{__version__}"
