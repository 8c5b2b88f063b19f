"""``kftrain launch`` (run a TFJob/PyTorchJob/MPIJob/TrainJob manifest) and ``kftrain validate`` (check one)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from kftrain.job.kinds.trainjob.catalog import RuntimeCatalog


def cmd_launch(args: argparse.Namespace) -> int:
    from kftrain.backends import KubernetesConfig, LocalConfig, choose_backend
    from kftrain.backends.base import BackendConfig
    from kftrain.backends.local import parse_command_overrides
    from kftrain.errors import JobSpecError
    from kftrain.job import kind_of, load_manifest_file, render_yaml, validate_job
    from kftrain.launch.step import run_job

    job = load_manifest_file(args.file, runtimes=runtime_catalog(args))
    if args.name is not None:
        job.metadata.name = args.name
        validate_job(job)  # the new name is checked as the manifest's own would be
    if args.dry_run:
        # What kubectl apply -f would apply: the runtimes the file carries, then the job.
        for companion in kind_of(job).companions(job):
            sys.stdout.write(yaml.safe_dump(dict(companion), sort_keys=False, default_flow_style=False) + "---\n")
        sys.stdout.write(render_yaml(job))
        return 0
    config: BackendConfig
    if args.local or choose_backend(args.backend)[0] == "local":
        config = LocalConfig(
            identity_path=args.identity_file,
            commands=parse_command_overrides(args.command or []),
            workdir=Path(args.workdir) if args.workdir else None,
            clean_env=args.clean_env,
            admit_suspended=args.admit,
        )
        if args.max_local_replicas:
            config.max_replicas = args.max_local_replicas
    elif args.admit:
        raise JobSpecError("--admit", "is for the local backend: on a cluster the job's queue (Kueue) admits it")
    else:
        config = KubernetesConfig(identity_path=args.identity_file)
    model_uri = _model_uri(job)
    if model_uri:
        from kftrain.launch.observe import observing

        # As the launch step does: replica logs and reported curves kept beside the model the job writes.
        with observing(config, job, model_uri):
            result = run_job(job, config, timeout=args.timeout)
    else:
        result = run_job(job, config, timeout=args.timeout)
    print(f"[kftrain] {result.describe()}")
    return 0


def _model_uri(job: Any) -> str:
    """The model URI the manifest gives its replicas (``KFTRAIN_MODEL_URI``), or "" when it gives none."""
    from kftrain.contract import MODEL_ENV
    from kftrain.job import main_container

    for rtype in job.replica_specs:
        container = main_container(job, rtype)
        for env in (container.env or []) if container is not None else []:
            if env.name == MODEL_ENV and env.value:
                return str(env.value)
    return ""


def cmd_validate(args: argparse.Namespace) -> int:
    from kftrain.job import kind_of, load_manifest_file, render_manifest
    from kftrain.job.manifest.schema import CRDSchemas
    from kftrain.job.validate import validate_for_cluster

    job = load_manifest_file(args.file, runtimes=runtime_catalog(args))
    validate_for_cluster(job)  # a manifest is validated for the cluster it is written for
    companions = kind_of(job).companions(job)
    if args.crd_dir:
        schemas = CRDSchemas.from_dir(args.crd_dir)
        for companion in companions:
            schemas.validate(dict(companion))
        schemas.validate(render_manifest(job))
    for companion in companions:
        meta = companion.get("metadata") or {}
        print(f"{args.file}: valid {companion.get('kind')} {meta.get('name')} ({companion.get('apiVersion')})")
    print(f"{args.file}: valid {job.kind} ({job.api_version})")
    return 0


def runtime_catalog(args: argparse.Namespace) -> RuntimeCatalog:
    """The runtimes a TrainJob may name: those Trainer installs, ``KFTRAIN_TRAINER_RUNTIMES``, and ``--runtimes``."""
    from kftrain.job.kinds.trainjob.catalog import RuntimeCatalog

    catalog = RuntimeCatalog.from_env()
    for runtime in RuntimeCatalog.from_paths(getattr(args, "runtimes", None) or [], builtin=False).runtimes():
        catalog.add(runtime)
    return catalog


def cmd_convert(args: argparse.Namespace) -> int:
    """Print the TrainJob a PyTorchJob or MPIJob becomes (validated on its runtime), and what it leaves behind."""
    import yaml

    from kftrain.job import kind_of, load_manifest, load_manifest_file

    job = load_manifest_file(args.file, runtimes=runtime_catalog(args))
    conversion = kind_of(job).to_trainjob(job, args.runtime)
    conversion.check_runtime(runtime_catalog(args))  # a runtime of the ML policy the job was converted for
    load_manifest(conversion.manifest, runtimes=runtime_catalog(args))  # the result must load on its runtime
    sys.stdout.write(yaml.safe_dump(conversion.manifest, sort_keys=False, default_flow_style=False))
    for note in conversion.notes:
        print(f"[kftrain convert] {note}", file=sys.stderr)
    return 0
