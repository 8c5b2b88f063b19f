"""Kubeflow Trainer's status server, for a job on this machine: where a TrainJob's nodes post their progress.

As the Trainer controller does (kubeflow/trainer@v2.3.0 ``pkg/statusserver/server.go``; its URL, CA and token given
as in ``plugins/trainjobstatus/trainjobstatus.go:116-135``), it serves ``POST .../trainjobs/{name}/status`` over HTTPS
on 127.0.0.1 with a CA of the job's own, and hands every accepted ``trainerStatus`` to ``on_status``. Anyone on the
machine can connect, so each connection is handled in its own thread with read deadlines, and :meth:`StatusServer.stop`
closes them all. On purpose, unlike the Trainer: a random token compared exactly (not a projected service-account
token: ``pkg/statusserver/auth.go:68-98``), the body checked against the CRD's rules here, one job's path served
(another's is a 404), a chunked body refused (411). tests/controlplane/test_trainer_status.py compares every answer.
"""

from __future__ import annotations

import contextlib
import datetime
import hmac
import ipaddress
import json
import re
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kftrain.errors import quoted
from kftrain.job.kinds.trainjob.policies import status_path
from kftrain.job.topology import StatusEndpoint

MAX_BODY = 1 << 16  # pkg/statusserver/server.go:33-34 maxBodySize
DRAIN_LIMIT = 256 << 10  # Go net/http: the unread body a server reads before closing (maxPostHandlerReadBytes)
# The largest Content-Length Go's net/http takes: strconv.ParseUint(cl, 10, 63); a larger one is "bad Content-Length",
# 400, before any handler runs (golang/go@go1.26.8:src/net/http/transfer.go parseContentLength; Trainer v2.3.0 builds
# with golang:1.26, kubeflow/trainer@v2.3.0:cmd/trainer-controller-manager/Dockerfile, go.mod "go 1.26.0").
MAX_CONTENT_LENGTH = (1 << 63) - 1
_CA_FILE, _TOKEN_FILE = "ca.crt", "token"  # plugins/trainjobstatus/trainjobstatus.go:49-50
RST_AVOIDANCE_DELAY_S = 0.5  # Go net/http server.go rstAvoidanceDelay: the answer's head start on a reset
READ_TIMEOUT_S = 10.0  # server.go readTimeout (10 s): the handshake and every read of a request
# Go's time.RFC3339 layout as time.Parse reads it (fractional seconds allowed after the seconds), ASCII digits only.
_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:[.,]\d+)?(?:Z|[+-](\d\d):(\d\d))", re.ASCII)
_DIGITS = re.compile(r"[0-9]+", re.ASCII)


def is_rfc3339(value: Any) -> bool:
    """Whether ``value`` is a time as metav1.Time reads one: a string Go's ``time.Parse(time.RFC3339, ...)`` takes
    (k8s.io/apimachinery pkg/apis/meta/v1/time.go UnmarshalJSON), its fields in range."""
    match = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return False
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
    zone_ok = match.group(7) is None or (int(match.group(7)) < 24 and int(match.group(8)) < 60)
    return 1 <= month <= 12 and 1 <= day <= days[month - 1] and hour < 24 and minute < 60 and second < 60 and zone_ok


def check_trainer_status(status: Any) -> str | None:
    """The first rule of the TrainJob CRD's ``status.trainerStatus`` that ``status`` breaks (None: none): the
    validation markers of pkg/apis/trainer/v1alpha1/trainjob_types.go:561-605."""
    if not isinstance(status, Mapping):
        return "trainerStatus: must be an object"
    if not status.get("lastUpdatedTime"):  # :562 XValidation has(self.lastUpdatedTime)
        return "trainerStatus: lastUpdatedTime is required when trainerStatus is present"
    # A metav1.Time (the CRD: format date-time), which the status server decodes before applying (server.go:147-154).
    if not is_rfc3339(status["lastUpdatedTime"]):
        return f"trainerStatus.lastUpdatedTime: must be an RFC 3339 time, got {quoted(status['lastUpdatedTime'])}"
    for key, low, high in (("progressPercentage", 0, 100), ("estimatedRemainingSeconds", 0, 2**31 - 1)):  # :568-579
        value = status.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high):
            return f"trainerStatus.{key}: must be an integer in [{low}, {high}], got {quoted(value)}"
    metrics = status.get("metrics") or []
    if not isinstance(metrics, list) or len(metrics) > 256:  # :583 MaxItems=256
        return "trainerStatus.metrics: must be a list of at most 256 metrics"
    for i, metric in enumerate(metrics):
        for key in ("name", "value"):  # :596-604 MinLength=1, MaxLength=64, strings
            value = metric.get(key) if isinstance(metric, Mapping) else None
            if not isinstance(value, str) or not 1 <= len(value) <= 64:
                return f"trainerStatus.metrics[{i}].{key}: must be a string of 1 to 64 characters"
    return None


class StatusServer:
    """The endpoint of one job: started with :meth:`start`, stopped with :meth:`stop`."""

    def __init__(
        self,
        namespace: str,
        name: str,
        folder: Path,
        on_status: Callable[[Mapping[str, Any]], None],
        read_timeout_s: float = READ_TIMEOUT_S,
    ) -> None:
        self.path = status_path(namespace, name)
        self.folder = folder
        self.on_status = on_status
        self.read_timeout_s = read_timeout_s
        self.token = secrets.token_urlsafe(32)
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> StatusEndpoint:
        self.folder.mkdir(parents=True, exist_ok=True)
        ca_pem, cert_pem, key_pem = _certificates()
        ca_file, token_file = self.folder / _CA_FILE, self.folder / _TOKEN_FILE
        ca_file.write_bytes(ca_pem)
        token_file.touch(mode=0o600)
        token_file.write_text(self.token)
        cert_file, key_file = self.folder / "server.crt", self.folder / "server.key"
        cert_file.write_bytes(cert_pem)
        key_file.touch(mode=0o600)
        key_file.write_bytes(key_pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        key_file.unlink()  # in memory now: nothing secret stays on disk but the token the nodes must read
        server = self

        class Handler(_Handler):
            owner = server

        Handler.timeout = self.read_timeout_s  # StreamRequestHandler.setup: every read of the request
        httpd = _Server(Handler, context, self.read_timeout_s)
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        url = f"https://127.0.0.1:{httpd.server_address[1]}{self.path}"
        return StatusEndpoint(url=url, ca_cert=str(ca_file), token=str(token_file))

    def stop(self) -> None:
        """Stop serving: returns at once whatever the clients do (the accept loop never waits on one), and the
        connections still open are closed, so nothing is applied once the job has ended."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


class _Server(ThreadingHTTPServer):
    """An HTTPS server whose accept loop only accepts: each connection's TLS handshake is made in that connection's
    thread, under the read deadline, so a client that connects and sends nothing holds only its own thread."""

    daemon_threads = True
    block_on_close = False  # server_close() closes the connections instead of joining their threads

    def __init__(self, handler: type[BaseHTTPRequestHandler], context: ssl.SSLContext, deadline_s: float) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.context = context
        self.deadline_s = deadline_s
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.closed = False

    def finish_request(self, request: Any, client_address: Any) -> None:  # in the connection's own thread
        with self.lock:
            if self.closed:
                return
            self.open.add(request)
        try:
            request.settimeout(self.deadline_s)
            with self.context.wrap_socket(request, server_side=True) as tls:
                with self.lock:
                    self.open.discard(request)
                    if self.closed:
                        return
                    self.open.add(tls)
                try:
                    self.RequestHandlerClass(tls, client_address, self)  # type: ignore[arg-type]  # typeshed: Self
                    _close_write_and_wait(tls)
                finally:
                    with self.lock:
                        self.open.discard(tls)
        finally:
            with self.lock:
                self.open.discard(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that breaks off, times out or sends garbage: its connection ends, and the job's console (where
        socketserver would print a traceback) is left to the replicas' lines."""

    def server_close(self) -> None:
        super().server_close()
        with self.lock:
            self.closed = True
            held, self.open = list(self.open), set()
        for conn in held:
            # socket.shutdown, not SSLSocket's: it wakes the connection's thread from its read, and leaves the TLS
            # state to that thread, which then closes the connection.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(conn, socket.SHUT_RDWR)


def _close_write_and_wait(conn: socket.socket) -> None:
    """End the connection's sending, then give the client a moment to read the answer before the connection is
    closed, as Go's net/http does (server.go closeWriteAndWait, rstAvoidanceDelay 500 ms): a connection closed on
    unread bytes is reset, and a client still sending its body would then see the reset, not the answer. Within that
    moment what the client sends is read and dropped, up to 256 KiB; the wait ends early when the client closes."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(conn, socket.SHUT_WR)
        deadline = time.monotonic() + RST_AVOIDANCE_DELAY_S
        drained = 0
        while (left := deadline - time.monotonic()) > 0:
            if drained >= DRAIN_LIMIT:
                time.sleep(left)  # no more read: the client's sending stalls, its reading does not
                break
            conn.settimeout(left)
            data = socket.socket.recv(conn, 1 << 14)  # the TLS records as they come: only to be dropped
            if not data:
                break
            drained += len(data)


class _Handler(BaseHTTPRequestHandler):
    owner: StatusServer

    def log_message(self, format: str, *args: Any) -> None:  # the job's output is the replicas' lines
        pass

    def _answer(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _plain(self, code: int, text: str) -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Connection", "close")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _refuse(self, code: int, reason: str, message: str) -> None:
        # A metav1.Status, as badRequest writes it (pkg/statusserver/server.go:206-220).
        self._answer(code, {"status": "Failure", "message": message, "reason": reason, "code": code})

    # The order of the checks is the Trainer's, each before the next: Go's net/http reads the request's
    # Content-Length before any handler (400); the body size middleware wraps the router (server.go:89-94, chain
    # in middleware.go: its first middleware is the outermost), so a large body is a 413 whatever the path or the
    # token; then the router (404), then the handler's token check (403), then the body. Checked against Trainer's
    # own server on the real control plane: tests/controlplane/test_trainer_status.py.

    def do_GET(self) -> None:
        if self._length() is not None:
            self._refuse(404, "NotFound", "Not found")  # server.go:201-204 handleDefault

    def do_POST(self) -> None:
        length = self._length()
        if length is None:
            return
        if self.path.split("?", 1)[0] != self.owner.path:
            self._refuse(404, "NotFound", "Not found")
            return
        # server.go:137-145 and auth.go:104-112: "Bearer <token>", the scheme in any case.
        parts = self.headers.get("Authorization", "").split()
        given = parts[1] if len(parts) == 2 and parts[0].lower() == "bearer" else ""
        if not hmac.compare_digest(given.encode(), self.owner.token.encode()):
            self._refuse(403, "Forbidden", "Forbidden")
            return
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            body = None
        if not isinstance(body, dict):  # server.go:147-154
            self._refuse(422, "Invalid", "Invalid payload")
            return
        status = body.get("trainerStatus")
        if status is not None:  # server.go:156-164: an empty update is answered and not applied
            problem = check_trainer_status(status)
            if problem is not None:  # the API server's refusal, passed on (server.go:169-178)
                self._refuse(422, "Invalid", problem)
                return
            self.owner.on_status(status)
        self._answer(200, body)

    def _length(self) -> int | None:
        """The body's length from its Content-Length, or None once the request is refused: not a decimal number of
        bytes, or two that differ, is a 400 as Go's net/http answers it, in plain text, before any handler runs
        (transfer.go fixLength; server.go serve: "400 Bad Request" for an error that is not a statusError); one
        over 64 KiB a 413; a chunked body a 411, since such a body is not read here. Neither a Content-Length nor a
        chunked body: no body (RFC 9112 6.3)."""
        given = {value.strip() for value in self.headers.get_all("Content-Length") or []}
        if not given:
            if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
                return 0
            self.close_connection = True
            self._refuse(411, "BadRequest", "Length Required: the body must come with a Content-Length")
            return None
        value = given.pop()
        length = _content_length(value)
        if given or length is None:
            self.close_connection = True
            self._plain(400, "400 Bad Request")
            return None
        if length > MAX_BODY:  # middleware.go bodySizeLimitMiddleware: from the header alone, the body unread
            # Answered at once, then the connection closed: what the client still sends is read (and dropped) only
            # after the answer, within a bound (_close_write_and_wait), so a body that never comes delays nothing
            # and a large one that does is not met with a reset before the client has the 413.
            self.close_connection = True
            self._refuse(413, "RequestEntityTooLarge", "Payload too large")
            return None
        return length


def _content_length(value: str) -> int | None:
    """``value`` as Go's net/http reads a Content-Length: ASCII decimal digits of at most ``MAX_CONTENT_LENGTH``
    (leading zeros allowed), else None; a number too long for Python's int() is never converted."""
    if not _DIGITS.fullmatch(value):
        return None
    significant = value.lstrip("0") or "0"
    if len(significant) > len(str(MAX_CONTENT_LENGTH)) or int(significant) > MAX_CONTENT_LENGTH:
        return None
    return int(significant)


def _certificates() -> tuple[bytes, bytes, bytes]:
    """A CA made for this job, and a certificate it signs for 127.0.0.1 and localhost: PEM CA, cert, key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kftrain local trainer status CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=7))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=7))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca.public_bytes(pem), cert.public_bytes(pem), key_pem
