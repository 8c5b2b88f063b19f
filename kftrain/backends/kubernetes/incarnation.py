"""Which events are about this life of a job's name, not an earlier job's of the same name.

A task retried after its job was deleted makes a job, and pods, of the same names, while the earlier one's events
stay for the event TTL (an hour: kubernetes@v1.36.3:pkg/controlplane/apiserver/options/options.go, EventTTL). An
event about the job or a pod the step has seen is this life's when its ``involvedObject.uid`` is the current one
(k8s.io/client-go@v0.36.3:tools/reference/ref.go, GetReference); one about an object not seen (a child Job, a
refused pod) when it was last recorded no earlier than the job was created (whole seconds: an earlier job deleted
within this one's creation second counts as this one's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


def _time(value: Any) -> datetime | None:
    """An API timestamp (a datetime from the client's models, or RFC 3339 text from JSON)."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return None


def event_time(event: Any) -> datetime | None:
    """When ``event`` (the client's CoreV1Event) was last recorded: its lastTimestamp, else its eventTime (the
    events.k8s.io recorder's), else its firstTimestamp or its creation."""
    return _time(event.last_timestamp or event.event_time or event.first_timestamp or event.metadata.creation_timestamp)


@dataclass(frozen=True)
class Incarnation:
    """One life of a job: the uids of its objects the step knows, by (kind, name), and when the job was created."""

    uids: Mapping[tuple[str, str], str] = field(default_factory=dict)
    created: datetime | None = None

    @classmethod
    def of(cls, job: Mapping[str, Any] | None, others: Iterable[Mapping[str, Any]] = ()) -> Incarnation:
        """The life of ``job`` (the object as served; None: not known, so no event is too old) and of ``others``
        (its pods as served)."""
        uids = {}
        for obj in (*([job] if job is not None else []), *others):
            meta = obj.get("metadata") or {}
            if meta.get("uid"):
                uids[(str(obj.get("kind") or "Pod"), str(meta.get("name")))] = str(meta["uid"])
        return cls(uids, _time(((job or {}).get("metadata") or {}).get("creationTimestamp")))

    def owns(self, event: Any) -> bool:
        """Whether ``event`` is about this life of the job or of one of its objects."""
        involved = event.involved_object
        known = self.uids.get((str(involved.kind), str(involved.name)))
        if known is not None and involved.uid:
            return bool(involved.uid == known)
        when = event_time(event)
        return self.created is None or when is None or when >= self.created
