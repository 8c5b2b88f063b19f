"""The fake API server's request handler: each path it serves and the method that answers it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from kftrain.job.kinds.trainjob.runtime import GROUP as RUNTIME_GROUP
from testbed.fake_k8s.api import PLURALS_BY_GROUP
from testbed.fake_k8s.core import CoreObjects
from testbed.fake_k8s.custom import CustomResources
from testbed.fake_k8s.discovery import Discovery


def _alternatives(names: Iterable[str]) -> str:
    return "|".join(map(re.escape, names))


_NS = r"/namespaces/([^/]+)"
ROUTES: Sequence[tuple[str, Callable[..., None]]] = (
    (r"/apis", Discovery.api_groups),
    (rf"/apis/({_alternatives(PLURALS_BY_GROUP)})", Discovery.api_group),
    (rf"/apis/({_alternatives(PLURALS_BY_GROUP)})/(v[a-z0-9]+)", Discovery.api_resources),
    (r"/api", Discovery.core_api),
    (r"/api/v1", Discovery.core_resources),
    # The jobs each API group serves: a collection and its items.
    *(
        (rf"/apis/{re.escape(group)}/(v[a-z0-9]+){_NS}/({_alternatives(plurals)}){item}", handler)
        for group, plurals in PLURALS_BY_GROUP.items()
        for item, handler in (("", CustomResources.collection), ("/([^/]+)", CustomResources.item))
    ),
    # Trainer's runtimes, which a TrainJob names (its cluster dependency): read, and created from a job's manifest.
    (rf"/apis/{re.escape(RUNTIME_GROUP)}/(v[a-z0-9]+)/(clustertrainingruntimes)/([^/]+)", CustomResources.runtime),
    (rf"/apis/{re.escape(RUNTIME_GROUP)}/(v[a-z0-9]+){_NS}/(trainingruntimes)/([^/]+)", CustomResources.runtime),
    (rf"/apis/{re.escape(RUNTIME_GROUP)}/(v[a-z0-9]+){_NS}/(trainingruntimes)", CustomResources.runtime_collection),
    (rf"/api/v1{_NS}/pods", CoreObjects.pods),
    (rf"/api/v1{_NS}/pods/([^/]+)", CoreObjects.pod),
    (rf"/api/v1{_NS}/pods/([^/]+)/log", CoreObjects.pod_log),
    (rf"/api/v1{_NS}/events", CoreObjects.events),
    (rf"/api/v1{_NS}/(configmaps|secrets)/([^/]+)", CoreObjects.core_object),
)


class Handler(Discovery, CustomResources, CoreObjects):
    """One request to the fake API server (``kube``, the FakeKube it serves, is set by FakeKube.start)."""

    routes = ROUTES
