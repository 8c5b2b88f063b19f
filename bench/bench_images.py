"""P8: the Python payload of each image and the cold import time of its step's entry point.

    python bench/bench_images.py [--images launch,data,pytorch,tensorflow,horovod] [--repeat 5] --json out.json

For each image, its requirement set (this checkout with the extras its Dockerfile installs, against
constraints.txt) is installed with ``pip install --target`` into an empty folder, as the image's
``pip install`` does (bytecode compiled), and the folder's size is summed (bytes of every file, in MB of
10^6 bytes). Framework images are measured in their cpu variant: torch is asked for as ``2.13.0+cpu`` so a
CUDA build is never measured by accident (pip must find the CPU wheel: PyTorch's CPU index, or a local
wheel). An image whose build slims its environment (``containers/slim_site_packages.py``) is measured after
the same slimming, with the same options. The cuda variants are not measured (several GB of nvidia-* wheels).
Horovod itself is built from source in its image and is not part of the horovod figure. Installs are cached by
the hash of pyproject.toml, setup.py, constraints.txt, the slimming script and the extras
(``~/.cache/kftrain/bench-images``).

The cold import time is that of the entry point's modules in a fresh ``python -S`` whose path is the
installed folder alone (and this checkout's code first): no other site-packages can lend a module. The median
of ``--repeat`` processes is reported (the file cache is warm after the first).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kftrain" / "bench-images"

# The modules each image's step starts with: what KFP's executor imports for a step, and the step's own code.
ENTRY_POINTS: dict[str, list[str]] = {
    "launch": ["kfp.dsl.executor_main", "kftrain.launch.component", "kftrain.backends.kubernetes.backend"],
    "data": ["kfp.dsl.executor_main", "kftrain.steps.prep"],
    "pytorch": ["kftrain.programs.torch_ddp"],
    "tensorflow": ["kftrain.programs.tf_distributed", "tensorflow"],
    "horovod": ["kftrain.programs.horovod_torch"],
}
# What the step's own code alone imports (the KFP executor left out), reported beside the total.
OWN_MODULES: dict[str, list[str]] = {
    "launch": ["kftrain.launch.component", "kftrain.backends.kubernetes.backend"],
    "data": ["kftrain.steps.prep"],
}
CPU_TORCH = "torch==2.13.0+cpu"
SLIM = ROOT / "containers" / "slim_site_packages.py"

IMPORT_TIMER = """
import sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2]]
modules = sys.argv[3].split(",")
own = [m for m in sys.argv[4].split(",") if m]
started = time.perf_counter()
for name in [m for m in modules if m not in own]:
    __import__(name)
before_own = time.perf_counter()
for name in own:
    __import__(name)
print(time.perf_counter() - started, time.perf_counter() - before_own)
"""


def image_extras(folder: str) -> list[str]:
    """The extras the image's Dockerfile installs this checkout with (``'.[a,b]'``)."""
    text = (ROOT / "containers" / folder / "Dockerfile").read_text()
    found = re.findall(r"['\"]?\.\[([\w,-]+)\]['\"]?", text)
    if not found:
        raise SystemExit(f"containers/{folder}/Dockerfile installs no '.[extras]' of this checkout")
    return sorted({e for group in found for e in group.split(",")})


def slim_options(folder: str) -> list[str] | None:
    """The options the image's build runs containers/slim_site_packages.py with; None when it does not run it."""
    text = (ROOT / "containers" / folder / "Dockerfile").read_text().replace("\\\n", " ")
    match = re.search(r"python3?\s+\S*slim_site_packages\.py\s+\S+((?:[ \t]+--[\w-]+)*)", text)
    return match[1].split() if match else None


# Not part of the package's source: a build from the checkout itself would reuse a stale build/ folder.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "runs", "local_outputs"
)


def requirement_set(folder: str, source: Path = ROOT) -> list[str]:
    extras = image_extras(folder)
    out = [f"{source}[{','.join(extras)}]"]
    if {"torch", "horovod"} & set(extras):  # [horovod] brings [torch]
        out.append(CPU_TORCH)
    return out


def cache_key(requirements: list[str]) -> str:
    digest = hashlib.sha256()
    for name in ("pyproject.toml", "setup.py", "constraints.txt", "containers/slim_site_packages.py"):
        digest.update((ROOT / name).read_bytes())
    digest.update("\n".join(r.replace(str(ROOT), ".") for r in requirements).encode())
    return digest.hexdigest()[:16]


def install(folder: str) -> Path:
    """The folder the image's requirement set is installed in, slimmed as its build slims it (cached)."""
    requirements = requirement_set(folder)
    slim = slim_options(folder)
    target = CACHE / f"{folder}-{cache_key([*requirements, f'slim {slim}'])}"
    if (target / ".complete").exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix=f".{folder}-") as tmp:
        work = Path(tmp) / "site"
        source = Path(tmp) / "source"
        shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        cmd += ["--target", str(work), "-c", str(ROOT / "constraints.txt"), *requirement_set(folder, source)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"pip install for {folder} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        if slim is not None:
            subprocess.run([sys.executable, str(SLIM), str(work), *slim], check=True, stdout=subprocess.DEVNULL)
        (work / ".complete").write_text("\n".join(requirements))
        shutil.rmtree(target, ignore_errors=True)
        work.rename(target)
    return target


def size_mb(path: Path) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            p = Path(root) / name
            if not p.is_symlink():
                total += p.stat().st_size
    return total / 1e6


def largest(path: Path, count: int = 5) -> list[tuple[str, float]]:
    """The biggest top-level entries (packages) of the installed folder, in MB."""
    sizes = [(p.name, size_mb(p) if p.is_dir() else p.stat().st_size / 1e6) for p in path.iterdir()]
    return sorted(sizes, key=lambda x: -x[1])[:count]


def import_times(target: Path, modules: list[str], own: list[str], repeat: int) -> tuple[list[float], list[float]]:
    totals, owns = [], []
    for _ in range(repeat):
        proc = subprocess.run(
            [sys.executable, "-S", "-c", IMPORT_TIMER, str(ROOT), str(target), ",".join(modules), ",".join(own)],
            capture_output=True,
            text=True,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            cwd=tempfile.gettempdir(),
        )
        if proc.returncode != 0:
            raise RuntimeError(f"importing {modules} from {target} failed:\n{proc.stderr[-3000:]}")
        total, own_s = (float(v) for v in proc.stdout.split()[-2:])
        totals.append(total)
        owns.append(own_s)
    return totals, owns


def measure(folder: str, repeat: int) -> dict[str, Any]:
    target = install(folder)
    modules = ENTRY_POINTS[folder]
    totals, owns = import_times(target, modules, OWN_MODULES.get(folder, []), repeat)
    return {
        "image": folder,
        "extras": image_extras(folder),
        "requirements": [r.replace(str(ROOT), ".") for r in requirement_set(folder)],
        "slimmed": slim_options(folder) is not None,
        "size_mb": size_mb(target),
        "largest": largest(target),
        "entry": modules,
        "import_s": totals,
        "own_import_s": owns if folder in OWN_MODULES else [],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", default=",".join(ENTRY_POINTS))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    results = {}
    for folder in [f.strip() for f in args.images.split(",") if f.strip()]:
        results[folder] = measure(folder, args.repeat)
        entry = results[folder]
        print(f"{folder}: {entry['size_mb']:.0f} MB, import {statistics.median(entry['import_s']):.2f} s", flush=True)
    Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
