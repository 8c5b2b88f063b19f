"""Where the tests find the repository and the operators' reference data, and the one loader of the CRD schemas.

The reference data (the operators' CRDs and examples, Trainer's runtimes) is checked out beside the repository
(``../shared/reference``); a test that needs a missing part of it is skipped, naming what is missing.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from kftrain.job.manifest.schema import CRDSchemas
from testbed import REPO_ROOT

REPO = REPO_ROOT
SHARED_DIR = REPO.parent / "shared"
REFERENCE_DIR = SHARED_DIR / "reference"
CRD_DIR = REFERENCE_DIR / "crds"
EXAMPLES_DIR = REFERENCE_DIR / "examples"
RUNTIMES_DIR = REFERENCE_DIR / "trainer-v2.3.0-runtimes"


def required(folder: Path) -> Path:
    """``folder`` of the reference data, or a skip when it is not checked out."""
    if not folder.is_dir():
        pytest.skip(f"reference data not available: {folder} is missing (the operators' CRDs and examples)")
    return folder


@functools.cache
def schemas_in(crd_dir: Path) -> CRDSchemas:
    """The served versions of the CRDs in ``crd_dir``, parsed once per process (the files are large)."""
    return CRDSchemas.from_dir(crd_dir)


def crd_schemas() -> CRDSchemas:
    """The operators' CRD schemas (what the API server validates a job with), or a skip without them."""
    return schemas_in(required(CRD_DIR))
