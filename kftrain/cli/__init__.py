"""The ``kftrain`` command: ``launch``, ``validate``, ``convert``, ``run``, ``compile``, ``submit``, ``schedule``,
``jobs`` (``kftrain --help``, docs/local-backend.md).

The only part of ``kftrain`` that imports the shipped pipelines (``kftrain_pipelines`` → ``kftrain_components`` →
``kftrain``), through :mod:`.pipelines`; the runtime package below never reaches up. :mod:`.app` holds the parser,
dispatch and each error's exit code; :mod:`.reference` resolves PIPELINE (a shipped name, a compiled file, or
MODULE:FUNCTION) for run, compile, submit and schedule; ``kfp/`` talks to a KFP API server.
"""

from kftrain.cli.app import main

__all__ = ["main"]
