"""P6 at scale: data prep's rows/s and peak RSS on Parquet files of growing size on disk, beside pyarrow streaming
the same file through (read + write) at the same size.

    python bench/bench_prep.py [--sizes-mb 1024,4096,8192] [--repeat 3] [--workdir DIR] --json out.json

For each size, one synthetic Parquet file of that many MiB on disk (64 float32 features and an integer label
in 10 classes, zstd, row groups of 250,000 rows) is written, then read by each side in its own subprocess (so
its peak RSS is its own), the sides interleaved, alternating which goes first:

- ours: ``prepare_dataset(out, source=file, train_shards=4)``: both of prep's passes (the profile, then encode,
  stratified split and sharded zstd Parquet output);
- pyarrow: ``ParquetFile(file).iter_batches(65536)`` into one ``ParquetWriter(compression="zstd")`` with pyarrow's
  defaults: the same bytes read once and written once, streamed (a ``read_table`` of 8 GiB would hold it all in
  memory);
- pyarrow without dictionaries (``use_dictionary=False``, as prep writes features), once per size, for reference:
  pyarrow's default hashes every float value for a dictionary it then abandons.

The file is written once per size and deleted after its rounds, as is every output after its run. The page cache
holds the file for both sides alike (the machine's memory is larger than the biggest size).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from child import run_child  # bench/child.py, beside this script

FEATURES = 64
CLASSES = 10
ROW_GROUP = 250_000
SIDES = ("pyarrow", "ours")
REFERENCE = "pyarrow-no-dictionary"

PYARROW = """
import sys, pyarrow.parquet as pq
source = pq.ParquetFile(sys.argv[1])
with pq.ParquetWriter(sys.argv[2], source.schema_arrow, compression="zstd", **eval(sys.argv[3])) as writer:
    for batch in source.iter_batches(batch_size=65536):
        writer.write_batch(batch)
"""
OURS = """
import sys
from kftrain.steps.prep import prepare_dataset
prepare_dataset(sys.argv[2], source=sys.argv[1], train_shards=4)
"""
# Runs the side's code, then prints its wall time and peak RSS, both of the run alone: the imports are outside the
# timing, and the peak is started over after them (Linux: /proc/self/clear_refs).
HARNESS = """
import json, resource, sys, time
import numpy, pyarrow, pyarrow.parquet, pyarrow.dataset
{imports}
code = sys.argv.pop(1)
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    reset = True
except OSError:
    reset = False
started = time.perf_counter()
exec(code)
seconds = time.perf_counter() - started
try:  # VmHWM: getrusage's ru_maxrss also keeps the RSS of the parent this process was forked from
    with open("/proc/self/status") as f:
        peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
except (OSError, StopIteration):
    peak, reset = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, False
print(json.dumps({{"seconds": seconds, "peak_of_run": reset, "rss_mb": peak}}))
"""


def write_source(path: Path, size_mb: int, seed: int = 0) -> int:
    """A Parquet file of at least ``size_mb`` MiB on disk; its row count."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    schema = pa.schema([*(pa.field(f"f{i:02d}", pa.float32()) for i in range(FEATURES)), pa.field("label", pa.int64())])
    # Row groups of ROW_GROUP rows; a file of a few MiB (the smoke test's) gets several smaller ones.
    group = min(ROW_GROUP, max(1000, size_mb * 1024 * 1024 // ((FEATURES + 2) * 4) // 4))
    rows = 0
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        while not path.exists() or path.stat().st_size < size_mb * 1024 * 1024:
            columns = {f"f{i:02d}": rng.random(group, dtype=np.float32) for i in range(FEATURES)}
            columns["label"] = rng.integers(0, CLASSES, group)
            writer.write_table(pa.table(columns))
            rows += group
    return rows


def run_side(side: str, source: Path, out: Path) -> dict[str, Any]:
    if side == "ours":
        code, imports = OURS, "import kftrain.steps.prep"
    else:
        code, imports = PYARROW, ""
    options = "{'use_dictionary': False}" if side == REFERENCE else "{}"
    return run_child(
        ["-c", HARNESS.format(imports=imports), code, str(source), str(out), options], f"{side} on {source}"
    )


def _clear(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mb", default="1024,4096,8192")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", default=None, help="where the files go (default: a temp folder)")
    parser.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes_mb.split(",")]
    results: dict[str, Any] = {"features": FEATURES, "classes": CLASSES, "sizes": {}}
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="kftrain-p6-") as tmp:
        work = Path(tmp)
        for size in sizes:
            source = work / f"table-{size}.parquet"
            started = time.perf_counter()
            rows = write_source(source, size)
            entry: dict[str, Any] = {
                "rows": rows,
                "bytes": source.stat().st_size,
                "write_s": time.perf_counter() - started,
                "runs": [],
            }
            for round_index in range(args.repeat):
                sides = SIDES if round_index % 2 == 0 else SIDES[::-1]
                if round_index == 0:
                    sides = (*sides, REFERENCE)
                for side in sides:
                    out = work / f"out-{side}" / ("dataset" if side == "ours" else "copy.parquet")
                    out.parent.mkdir(exist_ok=True)
                    result = run_side(side, source, out)
                    _clear(out)
                    entry["runs"].append({"round": round_index, "side": side, **result})
            results["sizes"][str(size)] = entry
            source.unlink()
    Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
