"""Submit and schedule pipelines on a Kubeflow Pipelines API server with the real ``kfp.Client``.

    kftrain submit PIPELINE [--param NAME=VALUE ...] [--experiment NAME] [--wait]
    kftrain schedule create PIPELINE (--cron "0 0 3 * * *" | --interval-seconds N) [--max-concurrency N]
                            [--no-catchup] [--start RFC3339] [--end RFC3339]
    kftrain schedule list
    kftrain schedule enable|disable|delete ID_OR_NAME

``PIPELINE`` is a shipped pipeline by name (``pytorch-digits``: its committed ``pipeline.yaml``), the path
of a compiled pipeline file, or ``MODULE:FUNCTION`` (compiled first, as ``kftrain compile`` compiles it). The
server is ``--host`` / ``KFP_HOST``; the namespace (multi-user deployments) ``--namespace`` / ``KFP_NAMESPACE``;
a bearer token ``--token`` / ``KFP_TOKEN``.

The pipeline is uploaded once by name; when a pipeline of that name exists, the file is uploaded as
a new version named ``<package version>-<git sha>`` (``nogit`` outside a git checkout; a pipeline compiled from
MODULE:FUNCTION adds ``-<8 hex>`` of its compiled file), and a version
of that name that already exists is reused, so submitting the same commit twice uploads nothing.

    commands.py       the options of ``submit`` and ``schedule``
    connection.py     the server: Connection, kfp.Client, its errors as messages, paging
    package.py        the pipeline file, its parameters and version name, checked before any request
    upload.py         the experiment and the pipeline version on the server, found or created
    submit.py         ``submit`` (and ``--wait``)
    schedule_spec.py  cron expressions, times and trigger options, checked before any request
    schedule.py       ``schedule create|list|enable|disable|delete``
"""

from kftrain.cli.kfp.commands import add_commands

__all__ = ["add_commands"]
