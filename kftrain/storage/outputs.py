"""Where a step writes its output artifacts: KFP's URI, or the same place under ``KFTRAIN_ARTIFACT_ROOT``."""

from __future__ import annotations

import os
from pathlib import Path

from kftrain.storage.uri import join, split_uri

ARTIFACT_ROOT_ENV = "KFTRAIN_ARTIFACT_ROOT"


def output_uri(kfp_uri: str) -> str:
    """Where a step writes an output artifact KFP placed at ``kfp_uri``.

    KFP's local runner only takes a local pipeline root. With ``KFTRAIN_ARTIFACT_ROOT`` set (for
    example ``s3://bucket/runs``), an output KFP put on a local path goes under that root instead,
    keeping its ``<run>/<task>/<output>`` suffix; the step then reports the new URI to KFP, so
    every later step reads it from there. URIs KFP already put in object storage are kept.
    """
    root = os.environ.get(ARTIFACT_ROOT_ENV, "").strip()
    scheme, path = split_uri(kfp_uri)
    if not root or scheme != "file":
        return kfp_uri
    return join(root, *Path(path).parts[-3:])
