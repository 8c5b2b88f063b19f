"""The job kinds, one package each (``tfjob``, ``pytorchjob``, ``mpijob``, ``trainjob``), and their registry.

``KINDS`` (:mod:`.registry`) is the one list of kinds; ``kind_of(job)`` (or ``kind_for(kind, api_version)``
where only the names are at hand) is the one way code reaches kind-specific facts and behaviour. Adding a kind:
a package here with its :class:`~.base.Kind`, its spec fields (a :class:`~kftrain.job.model.JobSpec`) and its
:class:`~.base.KindOptions` (launch inputs and default program), one line in :func:`.registry._registered`, and
a component folder ``components/training/<kind>_launch``.
"""

from kftrain.job.kinds.base import GROUP, Kind, KindOptions, KindSpec, Program, Workload, launch_input
from kftrain.job.kinds.registry import KINDS, KindRegistry, kind_for, kind_of, main_container

__all__ = [
    "GROUP",
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
]
