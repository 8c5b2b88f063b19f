"""The step's process in its task pod's main container, and what cancelling the run does to it.

The main container's PID 1 is Argo's emissary; its command is KFP's launcher, which runs the step as a plain child
with no process group of its own and no signal handling. A cancel reaches the step as SIGTERM and leaves it between
0 and 1 s, not the pod's grace period (the chain, cited, is beside :data:`EMISSARY_POLL_S`). :func:`run_step` starts
the step as the leader of a process group standing for the launcher's, its output piped as the launcher pipes it
(:class:`_LauncherPipe`); a cancel ends that pipe and sends the group SIGTERM, waits ``grace_s`` (the emissary's poll,
:data:`EMISSARY_POLL_S` at most) and sends SIGKILL.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

# The main container's PID 1 is Argo's emissary; its command is KFP's launcher (set by the driver:
# kubeflow/pipelines@2.5.0:backend/src/v2/driver/driver.go:474-475; @2.17.0 driver.go:320-321), which runs the
# step as a plain child, with no process group of its own and no signal handling (``exec.Command(...).Run()``:
# kubeflow/pipelines@2.5.0:backend/src/v2/component/launcher_v2.go:519-527; @2.17.0 launcher_v2.go:707-715; no
# ``signal.Notify`` in backend/src/v2). KFP 2.17.0 builds against and deploys Argo Workflows v4.0.5
# (kubeflow/pipelines@2.17.0:go.mod:10; manifests/kustomize/third-party/argo/base/
# workflow-controller-deployment-patch.yaml:14-19). Cancelling a run, with A = argoproj/argo-workflows@v4.0.5:
# 1. KFP's API server sets the workflow's ``activeDeadlineSeconds`` to 0 (kubeflow/pipelines@2.17.0:
#    backend/src/apiserver/resource/resource_manager.go:1023-1039, common/util/execution_spec.go:294-305);
# 2. the workflow controller, past the deadline, terminates each running pod's containers
#    (A:workflow/controller/exec_control.go:56-64): it execs ``/var/run/argo/argoexec kill 15 1`` in each of them
#    (A:workflow/controller/pod/queue.go:118-126, 55-71; A:workflow/signal/signal.go:19-45), then SIGKILL the same
#    way after the pod's ``terminationGracePeriodSeconds`` (30 s unless set, queue.go:69);
# 3. PID 1, the emissary, catches every signal and forwards it to its child's process group
#    (A:cmd/argoexec/commands/emissary.go:110-114, 182-191; A:workflow/executor/osspecific/signal_darwin.go:19-25,
#    which signal_linux.go links to, sends to ``-pgid``; command_unix.go:37-39 starts the child with ``Setpgid``).
#    The launcher and the step share that group: the step's process gets SIGTERM;
# 4. the launcher, which handles no signal, exits at once (Go's default for SIGTERM); the emissary reaps it at its
#    next poll (signal_darwin.go:31-59, ``Wait4`` then a one-second sleep; emissary.go:227) and exits, and with
#    PID 1 gone the kernel kills every process left in the container's PID namespace. So the step has what is left
#    of that second after its SIGTERM, between 0 and 1 s, not the pod's grace period.
EMISSARY_POLL_S = 1.0


_PR_SET_PDEATHSIG = 1


def _die_with_the_harness() -> None:
    """In the step's process before it runs: SIGKILL when the harness's thread that started it ends, however it
    ends (a test killed by a timeout leaves no step behind: in a cluster the pod would be gone)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _group_alive(process: subprocess.Popen[bytes]) -> bool:
    """Whether any process of the group ``process`` leads is still running (the leader reaped once it ended)."""
    process.poll()
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return False
    return True


class StepCancelled(Exception):
    """The run was cancelled while the step ran: its process got SIGTERM, then SIGKILL."""


@dataclass
class Cancel:
    """A cancel of the run, set by a test (e.g. from the simulated operator once the job runs)."""

    grace_s: float = EMISSARY_POLL_S  # from the step's SIGTERM to the PID namespace's end
    requested: threading.Event = field(default_factory=threading.Event)
    sigterm_at: float | None = None  # time.monotonic() when the step's group got SIGTERM

    def set(self) -> None:
        self.requested.set()


class _LauncherPipe:
    """The step's stdout and stderr as KFP's launcher takes them by default (``PUBLISH_LOGS`` "true" in every
    release's manifests, kubeflow/pipelines@2.17.0:manifests/kustomize/base/pipeline/
    ml-pipeline-apiserver-deployment.yaml:114-115, and the launcher's own flag default, backend/src/v2/cmd/
    launcher-v2/main.go:49): one pipe, copied by the launcher to its stdout and the executor-logs file
    (backend/src/v2/component/launcher_v2.go:699-711, getLogWriter 632-652: ``io.MultiWriter``). When the launcher
    exits on SIGTERM its end of the pipe goes with it: what the step writes after that is lost (EPIPE)."""

    def __init__(self, log: Path) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self._stop = threading.Event()
        self._copier = threading.Thread(target=self._copy, args=(log,), daemon=True)

    def start(self) -> None:
        os.close(self.write_fd)  # the step holds the only writer: end of file when it ends
        self._copier.start()

    def _copy(self, log: Path) -> None:
        try:
            with log.open("wb") as out:
                while not self._stop.is_set():
                    if not select.select([self.read_fd], [], [], 0.02)[0]:
                        continue
                    chunk = os.read(self.read_fd, 65536)
                    if not chunk:
                        return
                    out.write(chunk)
                    out.flush()
        finally:
            os.close(self.read_fd)

    def launcher_exits(self) -> None:
        """The launcher's exit (Go's default for SIGTERM): the pipe's read end is closed, nothing more is copied."""
        self._stop.set()
        self._copier.join()

    def drained(self) -> None:
        """The step ended: what is left in the pipe is copied (``cmd.Run`` waits for it) before the log is read."""
        self._copier.join()


def run_step(
    argv: list[str], *, env: dict[str, str], cwd: Path, log: Path, timeout: float, cancel: Cancel | None
) -> int:
    """Run the step's command to its end (its output in ``log``, through :class:`_LauncherPipe`); its exit code.
    Raises :class:`StepCancelled` when ``cancel`` is set meanwhile, :class:`TimeoutError` past ``timeout``."""
    pipe = _LauncherPipe(log)
    try:
        # Its own process group, led by the step: the group stands for the launcher's, which the step shares.
        out = pipe.write_fd  # stdout and stderr both
        process = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=out, stderr=out, start_new_session=True, preexec_fn=_die_with_the_harness
        )
    except BaseException:
        os.close(pipe.read_fd)
        os.close(pipe.write_fd)
        raise
    pipe.start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                return process.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
            if cancel is not None and cancel.requested.is_set():
                cancel.sigterm_at = time.monotonic()
                # The emissary forwards SIGTERM to the launcher's group: the launcher exits at once, the step's
                # handler runs on with its output going nowhere.
                pipe.launcher_exits()
                os.killpg(process.pid, signal.SIGTERM)
                # The launcher's exit does not end the step's: the emissary's next poll does, grace_s later.
                while time.monotonic() < cancel.sigterm_at + cancel.grace_s and _group_alive(process):
                    time.sleep(0.01)
                raise StepCancelled(
                    f"run cancelled: the step's process group got SIGTERM, and SIGKILL {cancel.grace_s:g} s later"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"the step ran past {timeout:g} s")
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # what is left dies with the container's PID namespace
        process.wait()
        # Every writer is gone now: the copier reads to the end (a cancel already closed the pipe).
        pipe.drained()
