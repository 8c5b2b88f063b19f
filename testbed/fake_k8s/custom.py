"""The fake API server's custom resources: the jobs of every kind (create, list, get, merge patch, delete) and
Trainer's runtimes.

A job created or patched is treated as kube-apiserver treats it (:mod:`testbed.fake_k8s.rules`): refused outside a
namespace that exists (404), pruned of the fields its CRD does not know, defaulted, validated against the operators'
real CRD schemas and its name (422 when invalid), its status left to the status subresource, its generation counted.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from kftrain.job.kinds.trainjob.runtime import GROUP as RUNTIME_GROUP
from kftrain.job.manifest.schema import defaulted
from testbed.fake_k8s.api import KIND_NAMES, group_of, merge_patch, now_iso, status_body
from testbed.fake_k8s.rules import name_problem, prepared_for_create, prepared_for_update
from testbed.fake_k8s.selectors import matches
from testbed.fake_k8s.watch import Watches


class CustomResources(Watches):
    """The jobs' collections and items, at the versions ``FakeKube.served`` lists, and Trainer's runtimes."""

    def _served(self, version: str, plural: str) -> bool:
        if version not in self.kube.served.get(plural, []):
            self._status(404, "NotFound", f"the server could not find the requested resource ({plural}.{version})")
            return False
        return True

    def collection(self, method: str, query: dict[str, str], body: Any, version: str, ns: str, plural: str) -> None:
        if not self._served(version, plural):
            return
        if method == "POST":
            self._create(version, ns, plural, body)
        elif method == "GET" and query.get("watch", "").lower() in ("true", "1"):
            self._watch(version, ns, plural, query)
        elif method == "GET":
            self._list(version, ns, plural, query)
        else:
            self._status(405, "MethodNotAllowed", method)

    def _create(self, version: str, ns: str, plural: str, body: Any) -> None:
        kube = self.kube
        if not isinstance(body, dict):
            self._status(400, "BadRequest", "body must be an object")
            return
        group = group_of(plural)
        if body.get("apiVersion") != f"{group}/{version}" or body.get("kind") != KIND_NAMES[plural]:
            self._status(400, "BadRequest", f"expected {group}/{version} {KIND_NAMES[plural]}")
            return
        meta = body.setdefault("metadata", {})
        if meta.get("namespace", ns) != ns:
            self._status(400, "BadRequest", "the namespace of the object does not match the namespace of the request")
            return
        with kube.cond:
            known_namespace = ns in kube.namespaces
        if not known_namespace:
            self._status(404, "NotFound", f'namespaces "{ns}" not found')
            return
        # As the API server decodes it: its unknown fields pruned, then the CRD's defaults filled in.
        crd = kube.schemas.get(body["apiVersion"], body["kind"])
        if crd is not None:
            body = defaulted(prepared_for_create(body, crd), crd.schema)
            meta = body["metadata"]
        for webhook in kube.admission:
            webhook(plural, body)
        name = meta.get("name")
        if not name:
            self._status(422, "Invalid", "metadata.name: Required value")
            return
        if not self._valid(plural, body):
            return
        with kube.cond:
            if (plural, ns, name) in kube.jobs:
                self._status(409, "AlreadyExists", f'{plural}.{group} "{name}" already exists')
                return
            # Its generation (1) is prepared_for_create's: a job no CRD serves was refused above.
            meta.update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=now_iso())
            kube.jobs[(plural, ns, name)] = body
            kube.created.append(copy.deepcopy(body))
            kube.record(plural, ns, "ADDED", body)
            out = copy.deepcopy(body)
        # The operator learns of the job before its creator does: a test that waits for the operator
        # (OperatorSim.join) right after creating a job finds it at work.
        if kube.on_job_created is not None:
            kube.on_job_created(plural, copy.deepcopy(out))
        self._send_json(201, out)

    def _valid(self, plural: str, body: dict[str, Any]) -> bool:
        """Whether the job ``body`` passes the API server's validation (its name, its CRD's schema and rules);
        answers 422 Invalid when it does not."""
        name = body["metadata"]["name"]
        why = name_problem(name)
        errors = [f'metadata.name: Invalid value: "{name}": {why}'] if why else []
        errors += self.kube.schemas.errors(body)
        if not errors:
            return True
        causes = [{"field": e.partition(": ")[0], "message": e.partition(": ")[2]} for e in errors]
        status = status_body(
            422, "Invalid", f'{KIND_NAMES[plural]}.{group_of(plural)} "{name}" is invalid: ' + "; ".join(errors)
        )
        status["details"] = {"name": name, "group": group_of(plural), "kind": KIND_NAMES[plural], "causes": causes}
        self._send_json(422, status)
        return False

    def _list(self, version: str, ns: str, plural: str, query: dict[str, str]) -> None:
        selected = self._selected(plural, query)
        if selected is None:
            return
        labels, fields = selected
        with self.kube.cond:
            items = [copy.deepcopy(o) for (p, n, _), o in self.kube.jobs.items() if p == plural and n == ns]
            rv = str(self.kube.rv)
        items = [o for o in items if matches(o, labels, fields)]
        self._send_json(
            200,
            {
                "apiVersion": f"{group_of(plural)}/{version}",
                "kind": f"{KIND_NAMES[plural]}List",
                "items": items,
                "metadata": {"resourceVersion": rv},
            },
        )

    def runtime_collection(
        self, method: str, query: dict[str, str], body: Any, version: str, ns: str, plural: str
    ) -> None:
        """POST of a namespaced TrainingRuntime (what a launch step creates from a job's own manifest)."""
        if method != "POST" or not isinstance(body, dict):
            self._status(405, "MethodNotAllowed", f"{method} is not served for {plural} here")
            return
        name = (body.get("metadata") or {}).get("name")
        if body.get("kind") != "TrainingRuntime" or not name:
            self._status(400, "BadRequest", "expected a named trainer.kubeflow.org TrainingRuntime")
            return
        if (body.get("metadata") or {}).get("namespace") not in (None, ns):
            self._status(400, "BadRequest", "the namespace of the object does not match the namespace of the request")
            return
        with self.kube.cond:
            if (plural, ns, name) in self.kube.runtimes:
                self._status(409, "AlreadyExists", f'{plural}.{RUNTIME_GROUP} "{name}" already exists')
                return
            obj = copy.deepcopy(body)
            obj["metadata"] = {**obj["metadata"], "namespace": ns, "resourceVersion": self.kube.bump()}
            self.kube.runtimes[(plural, ns, name)] = obj
        self._send_json(201, obj)

    def runtime(self, method: str, query: dict[str, str], body: Any, version: str, *where: str) -> None:
        """GET of a Trainer v2 runtime: ``where`` is (plural, name), or (namespace, plural, name)."""
        ns, plural, name = ("", *where) if len(where) == 2 else where
        if method != "GET":
            self._status(405, "MethodNotAllowed", f"{method} is not served for {plural} here")
            return
        with self.kube.cond:
            obj = copy.deepcopy(self.kube.runtimes.get((plural, ns, name)))
        if obj is None:
            self._status(404, "NotFound", f'{plural}.{RUNTIME_GROUP} "{name}" not found')
        else:
            self._send_json(200, obj)

    def item(
        self, method: str, query: dict[str, str], body: Any, version: str, ns: str, plural: str, name: str
    ) -> None:
        if not self._served(version, plural):
            return
        kube = self.kube
        key = (plural, ns, name)
        if method == "GET":
            with kube.cond:
                obj = copy.deepcopy(kube.jobs.get(key))
            if obj is None:
                self._status(404, "NotFound", f'{plural}.{group_of(plural)} "{name}" not found')
            else:
                self._send_json(200, obj)
        elif method == "DELETE":
            policy = (body or {}).get("propagationPolicy") or query.get("propagationPolicy")
            if kube.delete_job(plural, ns, name, policy):
                self._send_json(200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}})
            else:
                self._status(404, "NotFound", f'{plural}.{group_of(plural)} "{name}" not found')
        elif method == "PATCH":
            ctype = self.headers.get("Content-Type", "")
            if "merge-patch" not in ctype:
                self._status(415, "UnsupportedMediaType", f"unsupported patch type {ctype}")
                return
            with kube.cond:
                old = kube.jobs.get(key)
                if old is None:
                    self._status(404, "NotFound", f'{plural}.{group_of(plural)} "{name}" not found')
                    return
                patched = merge_patch(old, body)
                crd = kube.schemas.get(old["apiVersion"], old["kind"])
                if crd is not None:
                    patched = defaulted(prepared_for_update(patched, old, crd), crd.schema)
                if not self._valid(plural, patched):
                    return
                old.clear()
                old.update(patched)
                kube.record(plural, ns, "MODIFIED", old)
                result = copy.deepcopy(old)
            self._send_json(200, result)
        else:
            self._status(405, "MethodNotAllowed", method)
