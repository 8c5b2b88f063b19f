"""Start the test control plane for a person, and stop it (needs root with --node):

    python -m testbed.controlplane [--node] [--image REF ...] up   start it in the background; prints the kubeconfig
    python -m testbed.controlplane load REF ...                    move built images into the running node
    python -m testbed.controlplane down                            stop it; the host is put back as it was found

`make cluster-up` / `make cluster-down` run these with --node and the launch image. One such cluster at a time (its
state: :data:`STATE`); the tests' clusters are apart from it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

STATE = Path("/run/kftrain-cluster") if os.geteuid() == 0 else Path("/tmp") / f"kftrain-cluster-{os.geteuid()}"
INFO, LOG, PID = STATE / "cluster.json", STATE / "cluster.log", STATE / "pid"
START_WAIT_S = 600.0
STOP_WAIT_S = 180.0


def _running() -> int:
    """The serving process's pid, or 0."""
    try:
        pid = int(PID.read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return 0
    return pid


def _tail(lines: int = 25) -> str:
    return "\n".join(LOG.read_text(errors="replace").splitlines()[-lines:]) if LOG.exists() else "(no log)"


def up(node: bool, images: list[str]) -> int:
    if _running():
        print(f"already running (pid {PID.read_text().strip()}); stop it with: python -m testbed.controlplane down")
        return 1
    STATE.mkdir(parents=True, exist_ok=True)
    INFO.unlink(missing_ok=True)
    command = [sys.executable, "-m", "testbed.controlplane", *(["--node"] if node else [])]
    command += [arg for ref in images for arg in ("--image", ref)] + ["serve"]
    with LOG.open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    PID.write_text(str(proc.pid))
    deadline = time.monotonic() + START_WAIT_S
    while not INFO.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.terminate()
            print(f"the cluster did not start:\n{_tail()}", file=sys.stderr)
            return 1
        time.sleep(0.2)
    info = json.loads(INFO.read_text())
    print(f"cluster up in {info['started_in_s']:.1f} s (log: {LOG})")
    print(f"  export KUBECONFIG={info['kubeconfig']}")
    print("  kubectl get nodes" if node else "  kubectl api-resources")
    if node:
        print("  load an image built by `make images`: python -m testbed.controlplane load <image>")
        print(f"  (then run it with imagePullPolicy: Never; in the node now: {', '.join(info['images'])})")
    print("  stop: python -m testbed.controlplane down   (or make cluster-down)")
    return 0


def serve(node: bool, images: list[str]) -> int:
    from testbed.controlplane.cluster import control_plane
    from testbed.controlplane.node import Node

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with control_plane(node_images=images if node else None) as plane:
        part = plane.parts.get("node")
        real = part if isinstance(part, Node) else None
        info = {
            "kubeconfig": str(plane.kubeconfig),
            "started_in_s": plane.started_in_s,
            "socket": str(real.paths.socket) if real else "",
            "images": sorted(i for i in real.containerd_images() if not i.startswith("sha256:")) if real else [],
        }
        print(json.dumps({**info, "phases": plane.phases, "node": real.phases if real else {}}), flush=True)
        INFO.write_text(json.dumps(info))
        stop.wait()
        INFO.unlink(missing_ok=True)
    print("stopped; the host is as it was found", flush=True)
    return 0


def load(images: list[str]) -> int:
    from testbed.controlplane.node_images import import_images
    from testbed.dockerfiles import image_env

    if not _running() or not INFO.exists() or not json.loads(INFO.read_text())["socket"]:
        print("no cluster with a node is running: make cluster-up", file=sys.stderr)
        return 1
    socket = Path(json.loads(INFO.read_text())["socket"])
    took = import_images(socket, images, image_env(), socket.parent.parent / "images", None)
    for ref, seconds in took.items():
        print(f"{ref}: in the node ({seconds:.1f} s)")
    return 0


def down() -> int:
    pid = _running()
    if not pid:
        print("no cluster running")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    while _running() and time.monotonic() < deadline:
        time.sleep(0.2)
    if _running():
        print(f"still stopping after {STOP_WAIT_S:.0f} s (pid {pid}); log: {LOG}", file=sys.stderr)
        return 1
    ok = "stopped; the host is as it was found" in _tail()
    print(_tail(1) if ok else f"stopped with an error:\n{_tail()}")
    PID.unlink(missing_ok=True)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.controlplane", description=__doc__.split("\n\n")[0])
    parser.add_argument("--node", action="store_true", help="with a real node (containerd, kubelet, kube-scheduler)")
    parser.add_argument("--image", action="append", default=[], help="an image to move into the node (repeatable)")
    parser.add_argument("action", choices=["up", "down", "load", "serve"])
    parser.add_argument("refs", nargs="*", help="load: the images")
    args = parser.parse_args(argv)
    if args.action == "up":
        return up(args.node, args.image)
    if args.action == "serve":
        return serve(args.node, args.image)
    if args.action == "load":
        return load(args.refs)
    return down()


if __name__ == "__main__":
    sys.exit(main())
