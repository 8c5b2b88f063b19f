"""Images into the node's containerd from the project's image storage (scripts/lib.sh image_env, where `make
images` builds them): the pause image every pod sandbox runs, built here from Debian's static ``catatonit``
(``FROM scratch``, one file), and any image named, moved with ``podman save --format oci-archive`` and ``ctr
images import``. Nothing is pulled from a registry.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from testbed.controlplane.host import ControlPlaneError
from testbed.controlplane.node_config import PAUSE_IMAGE

CATATONIT = Path("/usr/bin/catatonit")
# containerd's namespace for the kubelet's images and containers (containerd@v1.6.20:pkg/cri/constants).
K8S_NAMESPACE = "k8s.io"


def _run(args: Sequence[str], env: Mapping[str, str] | None = None, what: str = "") -> str:
    result = subprocess.run(list(args), capture_output=True, text=True, env=None if env is None else dict(env))
    if result.returncode:
        raise ControlPlaneError(f"{what or args[0]} failed ({result.returncode}): {result.stderr.strip()[-2000:]}")
    return result.stdout


def image_exists(ref: str, env: Mapping[str, str]) -> bool:
    return subprocess.run(["podman", "image", "exists", ref], env=dict(env), check=False).returncode == 0


def ensure_pause_image(env: Mapping[str, str]) -> None:
    """Build :data:`PAUSE_IMAGE` in the image storage unless it is there: catatonit as PID 1 with ``-P``, its pause
    mode (it reaps the pod's zombies and waits for a signal, as Kubernetes' own pause does)."""
    if image_exists(PAUSE_IMAGE, env):
        return
    if not CATATONIT.is_file():
        raise ControlPlaneError(f"{CATATONIT} missing: run scripts/install_node_tools.sh")
    container = _run(["buildah", "from", "scratch"], env).strip()
    try:
        _run(["buildah", "copy", container, str(CATATONIT), "/catatonit"], env)
        _run(["buildah", "config", "--entrypoint", '["/catatonit", "-P"]', "--cmd", "", container], env)
        _run(["buildah", "commit", "--quiet", container, PAUSE_IMAGE], env, "buildah commit (pause image)")
    finally:
        subprocess.run(["buildah", "rm", container], env=dict(env), capture_output=True, check=False)


def ctr(socket: Path, *args: str) -> list[str]:
    return ["ctr", "--address", str(socket), "--namespace", K8S_NAMESPACE, *args]


def containerd_images(socket: Path) -> set[str]:
    return set(_run(ctr(socket, "images", "list", "--quiet")).split())


def import_images(socket: Path, refs: Sequence[str], env: Mapping[str, str], scratch: Path) -> dict[str, float]:
    """Move each of ``refs`` from the image storage into containerd (unpacked for its snapshotter); the seconds each
    took. A ref not in the storage fails, naming it and how to build it."""
    missing = [ref for ref in refs if not image_exists(ref, env)]
    if missing:
        raise ControlPlaneError(f"not in the image storage: {', '.join(missing)} (run `make images`)")
    took = {}
    scratch.mkdir(parents=True, exist_ok=True)
    for ref in refs:
        began = time.monotonic()
        archive = scratch / "image.tar"
        try:
            _run(["podman", "save", "--quiet", "--format", "oci-archive", "-o", str(archive), ref], env, "podman save")
            _run(
                ctr(socket, "images", "import", "--base-name", ref.rsplit(":", 1)[0], str(archive)), None, "ctr import"
            )
        finally:
            archive.unlink(missing_ok=True)
        if ref not in containerd_images(socket):
            raise ControlPlaneError(f"{ref} not in containerd after import: {sorted(containerd_images(socket))}")
        took[ref] = time.monotonic() - began
    return took
