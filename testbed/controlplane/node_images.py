"""Images into the node's containerd from the project's image storage (scripts/lib.sh image_env, where `make
images` builds them): the pause image every pod sandbox runs, built here from Debian's static ``catatonit``
(``FROM scratch``, one file), and any image named, moved with ``podman save --format oci-archive`` and ``ctr
images import``; and the PyTorchJob init container's image, Debian bookworm's minbase with ``bind9-dnsutils``
(mmdebstrap from the Debian mirror, kept by the key of its inputs). Nothing is pulled from a registry.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from testbed.controlplane.host import ControlPlaneError
from testbed.controlplane.node_config import PAUSE_IMAGE

CATATONIT = Path("/usr/bin/catatonit")
# The PyTorchJob Workers' init container image (the training-operator's --pytorch-init-container-image): its
# command is `sh -c '... seq ... if nslookup <master>; then ... break ... sleep 2 ...'` (kubeflow/training-operator@
# v1.9.0:pkg/controller.v1/pytorch/initcontainer.go:37-46); its default, alpine:3.10, would be pulled. Debian's
# busybox 1.35 nslookup exits 1 once any search domain answers NXDOMAIN, even after the master's name resolved
# (docs/control-plane-findings.md, N11), so the Worker never started: BIND's nslookup (bind9-dnsutils) exits 0 when
# the name resolves, as Alpine's did. minbase brings sh, seq and sleep.
INIT_IMAGE = "localhost/kftrain/pytorch-init:bookworm-dnsutils"
INIT_PACKAGES = ("bind9-dnsutils",)
INIT_LABEL = "org.kftrain.inputs"
# What the image's key reads apt's candidate version of (a security update of any of them builds it again).
INIT_KEYED_PACKAGES = (*INIT_PACKAGES, "bind9-libs", "libc6", "dash", "coreutils", "base-files")
DEBIAN_MIRROR = os.environ.get("KFTRAIN_DEBIAN_MIRROR", "http://deb.debian.org/debian")
DEBIAN_SECURITY = os.environ.get("KFTRAIN_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
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


def _init_sources() -> list[str]:
    return [
        f"deb {DEBIAN_MIRROR} bookworm main",
        f"deb {DEBIAN_MIRROR} bookworm-updates main",
        f"deb {DEBIAN_SECURITY} bookworm-security main",
    ]


def _init_mmdebstrap(target: Path) -> list[str]:
    """mmdebstrap's command: minbase, no recommends, no documentation or translations (they only take room)."""
    excludes = [f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("man", "doc", "info", "locale")]
    return [
        "mmdebstrap",
        "--quiet",
        "--variant=minbase",
        f"--include={','.join(INIT_PACKAGES)}",
        '--aptopt=APT::Install-Recommends "false"',
        *excludes,
        "bookworm",
        str(target),
        *_init_sources(),
    ]


def init_image_key() -> str:
    """The key of the init image's inputs: its recipe, the mirrors, and apt's candidate versions of its packages."""
    policy = _run(["apt-cache", "policy", *INIT_KEYED_PACKAGES], what="apt-cache policy")
    versions = [line.split()[-1] for line in policy.splitlines() if "Candidate:" in line]
    recipe = json.dumps([_init_mmdebstrap(Path("rootfs.tar")), INIT_KEYED_PACKAGES, versions])
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def ensure_init_image(env: Mapping[str, str]) -> float:
    """Build :data:`INIT_IMAGE` unless the storage holds one of the same key; the seconds the build took (0: kept).
    The root filesystem's tar is made beside the cache and removed once imported."""
    key = init_image_key()
    if image_exists(INIT_IMAGE, env):
        have = _run(
            ["podman", "image", "inspect", "--format", f"{{{{ index .Labels {json.dumps(INIT_LABEL)} }}}}", INIT_IMAGE],
            env,
        ).strip()
        if have == key:
            return 0.0
    if shutil.which("mmdebstrap") is None:
        raise ControlPlaneError("mmdebstrap missing: run scripts/install_node_tools.sh")
    began = time.monotonic()
    STORE_CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=STORE_CACHE, prefix=".init-") as work:
        rootfs = Path(work) / "rootfs.tar"
        _run(_init_mmdebstrap(rootfs), what="mmdebstrap (init image)")
        old = image_id(INIT_IMAGE, env) if image_exists(INIT_IMAGE, env) else ""
        changes = ["ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin", f"LABEL {INIT_LABEL}={key}"]
        _run(["podman", "import", "--quiet", *[f"--change={c}" for c in changes], str(rootfs), INIT_IMAGE], env)
    if old and old != image_id(INIT_IMAGE, env):
        subprocess.run(["podman", "rmi", old], env=dict(env), capture_output=True, check=False)
    return time.monotonic() - began


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
