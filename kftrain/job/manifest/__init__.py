"""Manifests in and out: :mod:`.load` (kubectl-style YAML to a job and back), :mod:`.parse` (untrusted YAML read
within bounds), :mod:`.schema` (the operators' CRD schemas, for validating what is rendered)."""

from kftrain.job.manifest.load import load_manifest, load_manifest_file, render_manifest, render_yaml

__all__ = ["load_manifest", "load_manifest_file", "render_manifest", "render_yaml"]
