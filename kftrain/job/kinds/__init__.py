"""The job kinds, one package each (``tfjob``, ``pytorchjob``, ``mpijob``, ``trainjob``), and their registry.

``KINDS`` (:mod:`.registry`) is the one list of kinds; ``kind_of(job)`` (or ``kind_for(kind, api_version)``
where only the names are at hand) is the one way code reaches kind-specific facts and behaviour. Adding a kind:
a package here with its :class:`~.base.Kind` and :class:`~.base.KindSpec`, its spec fields (a
:class:`~kftrain.job.model.JobSpec`) and its :class:`~.options.KindOptions` (launch inputs, and which of the default
programs of :mod:`.programs` it runs), one line in :func:`.registry._registered`, a component folder
``components/training/<kind>_launch``, and a rule for its plural in ``deploy/rbac/role.yaml``.
"""

from kftrain.job.kinds.base import GROUP, ISTIO_INJECT_ANNOTATION, Kind, KindSpec, without_mesh_sidecars
from kftrain.job.kinds.options import KindOptions, Program, Workload, launch_input
from kftrain.job.kinds.registry import KINDS, KindRegistry, kind_for, kind_of, main_container

__all__ = [
    "GROUP",
    "ISTIO_INJECT_ANNOTATION",
    "KINDS",
    "Kind",
    "KindOptions",
    "KindRegistry",
    "KindSpec",
    "Program",
    "Workload",
    "kind_for",
    "kind_of",
    "launch_input",
    "main_container",
    "without_mesh_sidecars",
]
