"""A TrainJob's trainer node reporting its progress to Kubeflow Trainer's status server, on the real control plane.

Trainer gives each trainer container its status server's URL, and the files of a projected volume holding a
ServiceAccount token for the TrainJob's status audience and a CA (kubeflow/trainer@v2.3.0:pkg/runtime/framework/
plugins/trainjobstatus/trainjobstatus.go). The node agent runs no program, so this plays both parts:
the kubelet's (:func:`node_credentials`: the token from the TokenRequest API, bound to the pod, as
kubernetes@v1.36.3:pkg/volume/projected/projected.go collectData requests it), and the program's (:func:`post`: a
POST over TLS checked against that CA for the URL's host, sent to 127.0.0.1 where Trainer listens).
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from kftrain.job.kinds.trainjob.policies import STATUS_CA_CERT_ENV, STATUS_TOKEN_ENV, STATUS_URL_ENV

Pod = Mapping[str, Any]
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Answer:
    code: int
    body: Any  # the decoded JSON, or the text when it is not JSON

    @property
    def reason(self) -> str:
        """The ``reason`` of a metav1.Status answer ('' for any other)."""
        return str(self.body.get("reason", "")) if isinstance(self.body, dict) else ""

    @property
    def message(self) -> str:
        return str(self.body.get("message", "")) if isinstance(self.body, dict) else str(self.body)


@dataclass(frozen=True)
class Credentials:
    """What a trainer node reads from its env and its mounted files."""

    url: str
    ca_pem: str
    token: str


def node_credentials(api_client: Any, pod: Pod, container: str | None = None) -> Credentials:
    """The endpoint and credentials the kubelet gives ``container`` of ``pod`` (default: its first): the env's URL, and
    the two files its env names, filled from the projected volume mounted over them."""
    spec = pod["spec"]
    main = next(c for c in spec["containers"] if container is None or c["name"] == container)
    env = {e["name"]: e.get("value", "") for e in main.get("env") or []}
    url, ca_path, token_path = env[STATUS_URL_ENV], env[STATUS_CA_CERT_ENV], env[STATUS_TOKEN_ENV]
    files = _projected_files(api_client, pod, main, {ca_path.rsplit("/", 1)[0], token_path.rsplit("/", 1)[0]})
    return Credentials(url=url, ca_pem=files[ca_path], token=files[token_path])


def _projected_files(api_client: Any, pod: Pod, container: Mapping[str, Any], folders: set[str]) -> dict[str, str]:
    """Every file of the container's projected volumes mounted at ``folders``, by its path in the container."""
    core = client.CoreV1Api(api_client)
    meta, spec = pod["metadata"], pod["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    files: dict[str, str] = {}
    for mount in container.get("volumeMounts") or []:
        projected = volumes.get(mount["name"], {}).get("projected")
        if projected is None or mount["mountPath"] not in folders:
            continue
        for source in projected.get("sources") or []:
            if "serviceAccountToken" in source:
                projection = source["serviceAccountToken"]
                request = {
                    "spec": {
                        "audiences": [projection["audience"]] if projection.get("audience") else None,
                        "expirationSeconds": projection.get("expirationSeconds", 3600),
                        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]},
                    }
                }
                account = spec.get("serviceAccountName") or "default"
                answer = core.create_namespaced_service_account_token(account, meta["namespace"], request)
                files[f"{mount['mountPath']}/{projection['path']}"] = str(answer.status.token)
            elif "configMap" in source:
                projection = source["configMap"]
                data = core.read_namespaced_config_map(projection["name"], meta["namespace"]).data or {}
                for item in projection.get("items") or [{"key": k, "path": k} for k in data]:
                    files[f"{mount['mountPath']}/{item['path']}"] = data[item["key"]]
    return files


def post(
    url: str,
    body: bytes,
    *,
    ca_pem: str,
    token: str | None = None,
    authorization: str | None = None,
    method: str = "POST",
    headers: Mapping[str, str] | None = None,
) -> Answer:
    """``method`` ``url`` with ``body`` (a Content-Length given), authenticated with ``token`` as a bearer (or the
    raw ``authorization`` header; neither: none), trusting ``ca_pem`` for the URL's host name."""
    parsed = urllib.parse.urlsplit(url)
    host, port = parsed.hostname or "", parsed.port or 443
    context = ssl.create_default_context(cadata=ca_pem)
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
    conn = http.client.HTTPSConnection(host, port, timeout=TIMEOUT_S, context=context)
    try:
        conn.sock = context.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise
    sent = {"Content-Type": "application/json", **(headers or {})}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    elif authorization is not None:
        sent["Authorization"] = authorization
    path = parsed.path + (f"?{parsed.query}" if parsed.query else "")
    try:
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        raw = response.read().decode(errors="replace")
    finally:
        conn.close()
    try:
        decoded: Any = json.loads(raw)
    except ValueError:
        decoded = raw
    return Answer(response.status, decoded)


def report(credentials: Credentials, trainer_status: Mapping[str, Any]) -> Answer:
    """What a trainer program sends: its progress as ``{"trainerStatus": ...}`` to the URL it was given."""
    body = json.dumps({"trainerStatus": dict(trainer_status)}).encode()
    return post(credentials.url, body, ca_pem=credentials.ca_pem, token=credentials.token)
