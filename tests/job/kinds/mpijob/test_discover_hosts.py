"""Elastic Horovod's host discovery for a v1 MPIJob: ``/etc/mpi/discover_hosts.sh`` as the training-operator
v1.9.0 controller writes it (``updateDiscoverHostsInConfigMap``), and the local backend keeping it current as
workers are lost and added (``LocalBackend.kill_replica`` / ``scale``)."""

from __future__ import annotations

import io
import re
import socket
import textwrap
import threading
import time
from pathlib import Path

from kftrain.backends import LocalBackend, LocalConfig
from kftrain.backends.local.one_machine import local_host_of, local_worker_host
from kftrain.job import load_manifest
from kftrain.job.kinds import kind_of
from kftrain.job.kinds.mpijob import DISCOVER_HOSTS, discover_hosts
from kftrain.job.topology import ReplicaId, Topology
from testbed.manifests import mpijob_v1, mpijob_v2, replica

W = [ReplicaId("Worker", i) for i in range(12)]


def test_the_script_lists_running_workers_sorted_by_pod_name():
    job = load_manifest(mpijob_v1({"Launcher": 1, "Worker": 12}, name="tm", slotsPerWorker=2))
    running = [W[10], W[2], W[0]]
    assert discover_hosts(job, running) == "#!/bin/sh\necho tm-worker-0:2\necho tm-worker-10:2\necho tm-worker-2:2"
    local = "#!/bin/sh\necho 127.0.0.1:2\necho 127.0.0.00000000001:2\necho 127.0.0.001:2"
    assert discover_hosts(job, running, local_host_of("localhost")) == local
    assert discover_hosts(job, []) == "#!/bin/sh"


def test_a_gpu_launcher_comes_first():
    launcher = replica(1, "mpi-launcher")
    launcher["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    job = load_manifest(mpijob_v1({"Launcher": launcher, "Worker": 1}, name="g"))
    assert discover_hosts(job, [W[0]]) == "#!/bin/sh\necho g-launcher:1\n\necho g-worker-0:1"


def test_every_local_worker_name_is_this_machine():
    names = [local_worker_host(i) for i in range(6)]
    assert len(set(names)) == 6  # horovodrun tells workers apart by name
    assert {socket.gethostbyname(n) for n in names} == {"127.0.0.1"}  # and runs their ranks here, without ssh


def test_v1_mounts_it_with_every_worker_at_the_start_and_v2beta1_does_not():
    job = load_manifest(mpijob_v1({"Launcher": 1, "Worker": 2}, name="tm"))
    here = Topology(files_root=Path("/w"), host_of=local_host_of("localhost"))  # as the local backend lays it out
    files = kind_of(job).operator_files(job, here)
    assert files[DISCOVER_HOSTS].content == "#!/bin/sh\necho 127.0.0.1:1\necho 127.0.0.01:1"
    assert files[DISCOVER_HOSTS].mode == 0o555
    v2 = load_manifest(mpijob_v2({"Launcher": 1, "Worker": 2}, name="tm"))
    assert DISCOVER_HOSTS not in kind_of(v2).operator_files(v2, Topology(files_root=Path("/w")))


# A stand-in for horovodrun: one rank per discovered host (HOROVOD_HOSTNAME set as horovodrun sets it), a
# report of each rank's end, and an exit once a host it has not seen is discovered.
FAKE_HOROVODRUN = textwrap.dedent(
    """
    import subprocess, sys, threading, time
    script = sys.argv[1]

    def hosts():
        out = subprocess.run([script], capture_output=True, text=True, check=True).stdout
        return [line.split(":")[0] for line in out.split()]

    def watch(host, proc):
        print(f"rank on {host} exited {proc.wait()}", flush=True)

    first = hosts()
    ranks = []
    for host in first:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env={"HOROVOD_HOSTNAME": host})
        threading.Thread(target=watch, args=(host, proc)).start()
        ranks.append(proc)
        print(f"rank on {host} started", flush=True)
    while not set(hosts()) - set(first):
        time.sleep(0.1)
    print("discovered " + " ".join(hosts()), flush=True)
    for proc in ranks:
        proc.kill()
    """
)


def wait_for(out: io.StringIO, pattern: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, out.getvalue()):
        assert time.monotonic() < deadline, f"no {pattern!r} in:\n{out.getvalue()}"
        time.sleep(0.05)


def test_the_local_backend_keeps_the_script_current_as_workers_go_and_come(tmp_path):
    program = tmp_path / "fake_horovodrun.py"
    program.write_text(FAKE_HOROVODRUN)
    launcher = replica(1, "mpi-launcher", command=["python", str(program), DISCOVER_HOSTS])
    job = load_manifest(mpijob_v1({"Launcher": launcher, "Worker": 2}, name="hosts"))
    out = io.StringIO()
    backend = LocalBackend(LocalConfig(out=out, workdir=tmp_path / "work", grace_period_s=2))
    script = tmp_path / "work" / DISCOVER_HOSTS.lstrip("/")
    handle = backend.submit(job)  # the launcher is given the script's path here, not /etc/mpi/...
    results: list = []
    waiter = threading.Thread(target=lambda: results.append(backend.wait(handle, timeout=120)))
    waiter.start()
    try:
        wait_for(out, r"rank on 127\.0\.0\.01 started")
        backend.kill_replica(handle, "worker-1")
        wait_for(out, r"lost worker-1 \(host 127\.0\.0\.01\): signalled 1 rank process")
        wait_for(out, r"rank on 127\.0\.0\.01 exited -9")
        assert script.read_text() == "#!/bin/sh\necho 127.0.0.1:1"
        backend.scale(handle, "Worker", 2)  # a new worker, never worker-1 again (horovodrun blacklisted its host)
        wait_for(out, r"discovered 127\.0\.0\.1 127\.0\.0\.001")
    finally:
        waiter.join(timeout=120)
        backend.cancel(handle)
    assert results and results[0].succeeded, out.getvalue()
    assert "rank on 127.0.0.1 exited -9" in out.getvalue()  # only once the launcher ended it
    assert job.replicas_of("Worker") == 2
