"""``kftrain submit`` and ``kftrain schedule``: pipelines on a Kubeflow Pipelines API server, with ``kfp.Client``.

A pipeline is uploaded once by name, later files as versions named ``<package version>-<git sha>`` (``nogit``
outside a checkout; ``-<8 hex>`` of the compiled file for ``MODULE:FUNCTION``); an existing version of that name is
reused, so submitting one commit twice uploads nothing. Modules: commands (the options), connection (the server,
errors, paging), package (the file, checked before any request), upload (experiment and version, found or created),
submit, schedule_spec (cron and trigger options, checked first), schedule.
"""

from kftrain.cli.kfp.commands import add_commands

__all__ = ["add_commands"]
