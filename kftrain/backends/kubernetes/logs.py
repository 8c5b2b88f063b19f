"""Every replica's log in the step's own output, each line prefixed ``[worker-1]``, however short the job.

:class:`LogFollower` streams the main container of every replica pod while the job runs, one thread per pod, learning
of pods from the pod watch (:meth:`LogFollower.update`); a refused stream is opened again within :mod:`.backoff`.
When the job has ended, :meth:`LogFollower.finish` lists the pods once more and prints every container run no stream
printed, and the last lines of a previous run nobody saw (``previous=True``); each run is printed once. The last
lines of each replica are kept for a failed job's message, and which replica ended non-zero last is read from the
pods as the watch delivers them.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from kftrain.answers import AnswerError
from kftrain.backends.console import Console
from kftrain.backends.kubernetes.api import cut, describe
from kftrain.backends.kubernetes.backoff import Backoff
from kftrain.backends.kubernetes.pod_state import Pod, main_container, pod_label, pod_name, pod_phase, pod_uid

if TYPE_CHECKING:
    from kftrain.backends.kubernetes.api import JobRef, KubeApi

_TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})


class LogFollower:
    """Streams the log of every replica pod, one thread per pod, each line prefixed ``[worker-1] ``.

    A Pending pod is waited on rather than skipped; a container restarted in place is followed again. The
    last ``tail_lines`` lines of each replica are kept; a previous run nobody streamed is shown by its last
    ``tail_lines`` lines. ``stream_from`` N starts each stream (and each run read at the end) at its run's
    last N lines, and ``replica`` follows that replica alone (``kftrain jobs logs --follow --tail N --replica
    R``); the launcher reads every replica's every run from its start.
    """

    def __init__(
        self,
        api: KubeApi,
        console: Console,
        job: JobRef,
        *,
        tail_lines: int,
        stream_from: int | None = None,
        replica: str | None = None,
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        self._api = api
        # Why a log could not be read at all (an answer that is no log), once; given to ``on_refused`` (None: said on
        # the console).
        self.refused = ""
        self._on_refused = on_refused or (lambda why: console.say(f"{why}; the replicas' logs are not followed"))
        self._console = console
        self._job = job
        self._tail_lines = tail_lines
        self._stream_from = stream_from  # each stream starts with its run's last lines (None: its first)
        self._replica = replica  # only this replica's pods (None: every replica's)
        self._cond = threading.Condition()
        self._pods: dict[str, Pod] = {}  # uid -> the pod as last seen; gone pods are dropped
        self._threads: dict[str, threading.Thread] = {}
        self._printed: set[tuple[str, int]] = set()  # (pod uid, container run) whose log is (being) printed
        self._finishing = False
        self._responses: set[Any] = set()
        self._tails: dict[str, collections.deque[str]] = {}
        self._failed: list[str] = []  # replicas in the order their container runs were seen ending non-zero
        self._failed_runs: set[tuple[str, int]] = set()  # (pod uid, container run) already in it

    def tail(self, label: str) -> list[str]:
        """The last lines printed from replica ``label``."""
        return list(self._tails.get(label, ()))

    def last_failed_tail(self) -> tuple[str | None, list[str]]:
        """The replica whose container was last seen ending non-zero, and its last lines; (None, []) if none."""
        label = self._failed[-1] if self._failed else None
        return label, self.tail(label) if label else []

    def update(self, pods: Mapping[str, Pod]) -> None:
        """The job's pods as the pod watch sees them now: follow new ones, wake those waiting to start."""
        with self._cond:
            if self._finishing:
                return
            self._pods = {pod_uid(p): p for p in pods.values() if self._wanted(p)}
            for pod in self._pods.values():
                self._note_failure(pod)
            for uid in self._pods:
                if uid not in self._threads:
                    thread = threading.Thread(target=self._follow_safely, args=(uid,), name=f"log {uid}", daemon=True)
                    self._threads[uid] = thread
                    thread.start()
            self._cond.notify_all()

    def finish(self, grace_s: float, *, collect: bool) -> None:
        """Stop following: let streams of ended containers deliver their last lines (``grace_s`` at most), cut
        the rest, then, with ``collect``, print every container run no stream printed."""
        with self._cond:
            if self._finishing:
                return
            self._finishing = True  # no stream starts from now on: the runs printed so far are final
            self._cond.notify_all()
        pods = self._list() if collect else None
        # A container still running will not end its stream: waiting for it would only delay the verdict.
        running = {pod_uid(p) for p in pods or [] if main_container(p, self._job.main_container).running}
        end = time.monotonic() + grace_s
        for uid, thread in list(self._threads.items()):
            if uid not in running:
                thread.join(max(0.0, end - time.monotonic()))
        with self._cond:
            responses = list(self._responses)
        for response in responses:
            cut(response)
        if pods is not None:
            self._collect(pods)

    # -- while the job runs ----------------------------------------------------------------------

    def _follow_safely(self, uid: str) -> None:
        try:
            self._follow(uid)
        except AnswerError as exc:  # a web page where the log was expected (a proxy): no later try mends it
            with self._cond:
                said, self.refused = self.refused, self.refused or str(exc)
            if not said:
                self._on_refused(str(exc))
        except Exception:  # a log stream must never end the job
            pass

    def _follow(self, uid: str) -> None:
        refused: Pod | None = None  # the pod as it was when its log could not be opened
        # Between two refused opens, the wait every list/watch loop waits (a log stream never ends the job).
        backoff = Backoff.of(self._api.retry, lambda: self._api.server, f"log of {uid}", gives_up=False)
        while True:
            with self._cond:
                pod = self._next_run(uid, refused)
                if pod is None:
                    return
                run = main_container(pod, self._job.main_container).run
                earlier = run > 0 and (uid, run - 1) not in self._printed
                self._printed.update({(uid, run), (uid, run - 1)} if earlier else {(uid, run)})
            if earlier:
                self._print_previous(pod)
            try:
                response = self._api.follow_pod_log(
                    self._job.namespace, pod_name(pod), self._container(pod), tail_lines=self._stream_from
                )
            except ApiException as exc:
                # Not streamable after all (the watch lagged: the container is waiting again, say): nothing
                # was printed, so the run is left to the next change of the pod, or to the end.
                with self._cond:
                    self._printed.discard((uid, run))
                    self._cond.wait_for(lambda: self._finishing, backoff.failed(describe(exc)))
                refused = pod
                continue
            refused = None
            if self._stream(pod, response):
                backoff.healthy()

    def _next_run(self, uid: str, refused: Pod | None) -> Pod | None:
        """(Under the lock) the pod once it has a started run not printed yet; None when there is none to wait for.

        ``refused`` is the pod as it was when a run's log could not be opened: the run is tried again only
        once the pod has changed.
        """
        while not self._finishing:
            pod = self._pods.get(uid)
            if pod is None:
                return None  # deleted: what it printed is all a stream will get
            main = main_container(pod, self._job.main_container)
            if main.started and (uid, main.run) not in self._printed and pod is not refused:
                return pod
            if pod_phase(pod) in _TERMINAL_POD_PHASES and pod is not refused:
                return None  # ended, and its last run is printed
            self._cond.wait()  # not started yet, or the same run: wait for the watch to show a change
        return None

    def _container(self, pod: Pod) -> str | None:
        return main_container(pod, self._job.main_container).name

    def _stream(self, pod: Pod, response: Any) -> bool:
        """Print the lines of an open log stream until it ends; whether it had any."""
        label = pod_label(pod)
        printed = False
        with self._cond:
            self._responses.add(response)
        try:
            for line in iter_resp_lines(response):
                printed = True
                self._print(label, line)
        finally:
            with self._cond:
                self._responses.discard(response)
            with contextlib.suppress(Exception):
                response.release_conn()
        return printed

    def _note_failure(self, pod: Pod) -> None:
        """Note the replica if a run of its container (this one, or the one before a restart) ended non-zero."""
        uid, main = pod_uid(pod), main_container(pod, self._job.main_container)
        for run, code in ((main.run - 1, main.previous_exit_code), (main.run, main.exit_code)):
            if code not in (None, 0) and (uid, run) not in self._failed_runs:
                self._failed_runs.add((uid, run))
                self._failed.append(pod_label(pod))

    # -- once the job has ended ------------------------------------------------------------------

    def _list(self) -> list[Pod]:
        """Every pod of the job now, also those the watch never showed; none when they cannot be listed."""
        try:
            return [p for p in self._api.job_pods(self._job) if self._wanted(p)]
        except ApiException:
            return []

    def _wanted(self, pod: Pod) -> bool:
        return self._replica is None or pod_label(pod) == self._replica

    def _collect(self, pods: list[Pod]) -> None:
        """Print what no stream printed: every pod's current run whole, and a previous run's last lines."""
        for pod in sorted(pods, key=pod_label):
            uid, main = pod_uid(pod), main_container(pod, self._job.main_container)
            if main.run > 0 and (uid, main.run - 1) not in self._printed:
                self._printed.add((uid, main.run - 1))
                self._print_previous(pod)
            if main.started and (uid, main.run) not in self._printed:
                self._printed.add((uid, main.run))
                for line in self._read(pod, tail_lines=self._stream_from, previous=False):
                    self._print(pod_label(pod), line)
            with self._cond:
                self._note_failure(pod)

    def _print_previous(self, pod: Pod) -> None:
        """The last lines of the run before the current one (restarted in place), while the API keeps them."""
        main = main_container(pod, self._job.main_container)
        lines = list(self._read(pod, tail_lines=self._tail_lines, previous=True))
        if not lines:
            return
        ended = f", which ended with exit code {main.previous_exit_code}" if main.previous_exit_code else ""
        self._console.say(
            f"{pod_label(pod)} restarted in place ({main.run} restart(s)); the last {len(lines)} log lines "
            f"of its previous run{ended}:"
        )
        for line in lines:
            self._print(pod_label(pod), line)

    def _read(self, pod: Pod, *, tail_lines: int | None, previous: bool) -> Iterator[str]:
        try:
            text = self._api.pod_log(
                self._job.namespace, pod_name(pod), self._container(pod), tail_lines=tail_lines, previous=previous
            )
        except ApiException:
            return  # gone, or the API no longer has that run
        yield from text.splitlines()

    def _print(self, label: str, line: str) -> None:
        self._tails.setdefault(label, collections.deque(maxlen=self._tail_lines)).append(line)
        self._console.replica_line(label, line)
