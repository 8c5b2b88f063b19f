"""Images into the node's containerd from the project's image storage (scripts/lib.sh image_env, where `make
images` builds them): the pause image every pod sandbox runs, built here from Debian's static ``catatonit``
(``FROM scratch``, one file), and any image named, moved with ``podman save --format oci-archive`` and ``ctr
images import``; and the PyTorchJob init container's image, busybox ``FROM scratch``. Nothing is pulled from a registry.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from testbed.controlplane.host import ControlPlaneError
from testbed.controlplane.node_config import PAUSE_IMAGE

CATATONIT = Path("/usr/bin/catatonit")
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static
# The PyTorchJob Workers' init container image (the training-operator's --pytorch-init-container-image): its
# command is `sh -c '... seq ... nslookup <master> ... sleep 2 ...'` (kubeflow/training-operator@v1.9.0:
# pkg/controller.v1/pytorch/initcontainer.go:37-46); its default, alpine:3.10, would be pulled.
INIT_IMAGE = "localhost/kftrain/pytorch-init:busybox-1.35.0"
INIT_APPLETS = ("sh", "nslookup", "seq", "sleep", "echo")
STORE_CACHE = Path(
    os.environ.get("KFTRAIN_NODE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kftrain/node"
)
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


def ensure_init_image(env: Mapping[str, str]) -> None:
    """Build :data:`INIT_IMAGE` unless it is there: busybox, ``FROM scratch``, copied to /bin under the name of each
    applet the init container runs."""
    if image_exists(INIT_IMAGE, env):
        return
    if not BUSYBOX.is_file():
        raise ControlPlaneError(f"{BUSYBOX} missing: run scripts/install_node_tools.sh")
    container = _run(["buildah", "from", "scratch"], env).strip()
    try:
        for applet in INIT_APPLETS:
            _run(["buildah", "copy", container, str(BUSYBOX), f"/bin/{applet}"], env)
        _run(["buildah", "config", "--env", "PATH=/bin", container], env)
        _run(["buildah", "commit", "--quiet", container, INIT_IMAGE], env, "buildah commit (init image)")
    finally:
        subprocess.run(["buildah", "rm", container], env=dict(env), capture_output=True, check=False)


def lock_store(stack: contextlib.ExitStack) -> Path | None:
    """containerd's root in :data:`STORE_CACHE`, locked until ``stack`` unwinds; None when another node holds it."""
    STORE_CACHE.mkdir(parents=True, exist_ok=True)
    lock = (STORE_CACHE / "lock").open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    stack.callback(lock.close)
    return STORE_CACHE / "containerd"


def image_id(ref: str, env: Mapping[str, str]) -> str:
    return _run(["podman", "image", "inspect", "--format", "{{.Id}}", ref], env).strip()


def ctr(socket: Path, *args: str) -> list[str]:
    return ["ctr", "--address", str(socket), "--namespace", K8S_NAMESPACE, *args]


def containerd_images(socket: Path) -> set[str]:
    return set(_run(ctr(socket, "images", "list", "--quiet")).split())


def import_images(
    socket: Path, refs: Sequence[str], env: Mapping[str, str], scratch: Path, store: Path | None
) -> dict[str, float]:
    """Move each of ``refs`` from the image storage into containerd (unpacked for its snapshotter), unless the
    cached ``store`` holds it already; the seconds each took (0 when kept). A ref not in the storage fails, naming
    it and how to build it."""
    missing = [ref for ref in refs if not image_exists(ref, env)]
    if missing:
        raise ControlPlaneError(f"not in the image storage: {', '.join(missing)} (run `make images`)")
    record = store.parent / "imported.json" if store else None
    imported: dict[str, str] = json.loads(record.read_text()) if record and record.exists() else {}
    present = containerd_images(socket)
    took = {}
    scratch.mkdir(parents=True, exist_ok=True)
    for ref in refs:
        began = time.monotonic()
        storage_id = image_id(ref, env)
        if ref in present and imported.get(ref) == storage_id:
            took[ref] = 0.0
            continue
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
        if record:
            imported[ref] = storage_id
            record.write_text(json.dumps(imported, indent=1))
    return took
