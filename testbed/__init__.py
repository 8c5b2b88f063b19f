"""What the tests and the benchmarks run against: the fakes of the real systems (the Kubernetes API server and
its operators, the KFP API, KFP's backend driver and launcher), the local S3 server, the reference data, the
manifest builders and the harnesses that drive a component, a backend or a pipeline.

Not shipped (the wheel holds kftrain, kftrain_components and kftrain_pipelines only), and never imported by
kftrain. ``tests/`` holds only tests, laid out like the code; ``bench/`` imports from here too.
"""

from pathlib import Path

# The repository's root: every test and benchmark finds the checkout's files from here, wherever it sits.
REPO_ROOT = Path(__file__).resolve().parents[1]
