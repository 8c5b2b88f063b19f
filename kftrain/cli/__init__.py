"""The ``kftrain`` command.

    kftrain launch -f JOB.yaml [--local | --backend B] [--command "..."] [--timeout S] [--dry-run]
    kftrain validate -f JOB.yaml [--crd-dir DIR]
    kftrain run [PIPELINE] [--param NAME=VALUE ...] [--pipeline-root DIR] [--storage local|s3]
    kftrain compile PIPELINE [-o FILE]  |  kftrain compile [--check] [--root DIR]
    kftrain submit PIPELINE [--param NAME=VALUE ...] [--experiment NAME] [--wait]
    kftrain schedule create|list|enable|disable|delete ...

PIPELINE (:mod:`kftrain.cli.reference`): a shipped pipeline's name, a compiled pipeline file, or MODULE:FUNCTION.

This package is the only part of ``kftrain`` that imports the shipped pipelines
(``kftrain_pipelines``, which import ``kftrain_components``, which import ``kftrain``): the runtime
package below it never reaches up.

    app.py        the parser, dispatch, and the exit code of each error
    launch.py     ``launch`` and ``validate``
    run.py        ``run``, with local_s3.py for ``--storage s3`` and quiet.py for its output
    compile.py    ``compile PIPELINE`` and ``compile [--check]``
    params.py     ``--param NAME=VALUE``, for run, submit and schedule
    reference.py  a pipeline reference, for run, compile, submit and schedule; user_module.py imports MODULE
    pipelines.py  the shipped pipelines and components (the one module importing them)
    kfp/          ``submit`` and ``schedule`` against a KFP API server
"""

from kftrain.cli.app import main

__all__ = ["main"]
