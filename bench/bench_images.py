"""P8: the Python payload of each image and the cold import time of its step's entry point.

    python bench/bench_images.py [--images launch,data,pytorch-cpu,...] [--repeat 5] [--keep-raw] --json out.json

Every image of :func:`kftrain.images.build_matrix` (the launch and data images, each framework image in each
variant) is measured the same way: its requirement set is installed with ``pip install --target`` into an empty
folder, as the image's ``pip install`` does (bytecode compiled), the folder is slimmed as the image's build slims
it (``containers/slim_site_packages.py``, with the options its Dockerfile gives), and the bytes of every file
are summed (MB of 10^6 bytes). The requirement set comes from the image's Dockerfile: this checkout with the
extras it installs, against constraints.txt, plus what the ``case "$VARIANT"`` arm of the variant installs.
A cpu arm's torch (PyTorch's CPU index) is asked for as ``2.13.0+cpu``, so a CUDA build is never measured by
accident (pip finds it in its find-links or index, as configured on this machine); a cuda variant is installed
from PyPI alone (this machine's pip configuration and local wheels left out), as the image's build gets it.

Then the slimmed folder is checked: the modules the Dockerfile's final check imports (the image's steps) are
imported from it in a fresh ``python -S`` whose path is that folder alone (and this checkout's code first), so a
removal that breaks one fails here as it fails the image's build. A Horovod image builds Horovod from source;
its figure adds Horovod's own files from the test venv's cached build (``~/.cache/kftrain/wheels``), the other
framework's library left out and slimmed the same way (that build has both frameworks; the image's has one),
and the check imports Horovod from them.

The cold import time is that of the entry point's modules in the same kind of fresh ``python -S``. The median
of ``--repeat`` processes is reported (the file cache is warm after the first).

Installs are cached under ``~/.cache/kftrain/bench-images``: the slimmed folder by the hash of pyproject.toml,
setup.py, constraints.txt, the requirement set, the slimming script and its options. The unslimmed install is
deleted once slimmed unless ``--keep-raw`` (then a change of the slimming reuses it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kftrain.images import build_matrix  # noqa: E402  (this checkout's, whatever the venv has)

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kftrain" / "bench-images"
WHEELS = Path(os.environ.get("KFTRAIN_WHEEL_CACHE", Path.home() / ".cache" / "kftrain" / "wheels"))
SLIM = ROOT / "containers" / "slim_site_packages.py"
COMPLETE = ".complete.json"  # in a slimmed folder: what it holds and its size before slimming
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PYPI = "https://pypi.org/simple"

# The modules each image's step starts with, timed: what KFP's executor imports for a step, and the step's own
# code (a trainer: its module).
ENTRY_POINTS: dict[str, list[str]] = {
    "launch": ["kfp.dsl.executor_main", "kftrain.launch.component", "kftrain.backends.kubernetes.backend"],
    "data": ["kfp.dsl.executor_main", "kftrain.steps.prep"],
    "pytorch": ["kftrain.programs.torch_ddp"],
    "tensorflow": ["kftrain.programs.tf_distributed", "tensorflow"],
    "horovod-pytorch": ["kftrain.programs.horovod_torch"],
    "horovod-tensorflow": ["kftrain.programs.horovod_tf", "tensorflow"],
}
# What the step's own code alone imports (the KFP executor left out), reported beside the total.
OWN_MODULES: dict[str, list[str]] = {
    "launch": ["kftrain.launch.component", "kftrain.backends.kubernetes.backend"],
    "data": ["kftrain.steps.prep"],
}
# Horovod's compiled library of each framework, in its wheel (the other framework's is left out of an image's).
HOROVOD_LIBS = {"torch": "horovod/torch/mpi_lib_v2.", "tf": "horovod/tensorflow/mpi_lib."}

IMPORT_TIMER = """
import sys, time
sys.path[:0] = sys.argv[1].split(":")
modules = sys.argv[2].split(",")
own = [m for m in sys.argv[3].split(",") if m]
started = time.perf_counter()
for name in [m for m in modules if m not in own]:
    __import__(name)
before_own = time.perf_counter()
for name in own:
    __import__(name)
print(time.perf_counter() - started, time.perf_counter() - before_own)
"""


@dataclass(frozen=True)
class Image:
    """One image of the release: its folder under containers/ and its variant ("" for a single-variant image)."""

    folder: str
    variant: str

    @property
    def key(self) -> str:
        return f"{self.folder}-{self.variant}" if self.variant else self.folder

    @property
    def name(self) -> str:
        return f"python-{self.key}"

    @property
    def dockerfile(self) -> str:
        return (ROOT / "containers" / self.folder / "Dockerfile").read_text().replace("\\\n", " ")


def images() -> list[Image]:
    return [Image(folder, variant) for folder, variant, _ in build_matrix()]


def by_key(key: str) -> Image:
    known = {i.key: i for i in images()}
    if key not in known:
        raise SystemExit(f"no image {key!r}; known: {', '.join(known)}")
    return known[key]


def image_extras(folder: str) -> list[str]:
    """The extras the image's Dockerfile installs this checkout with (``'.[a,b]'``)."""
    found = re.findall(r"['\"]?\.\[([\w,-]+)\]['\"]?", Image(folder, "").dockerfile)
    if not found:
        raise SystemExit(f"containers/{folder}/Dockerfile installs no '.[extras]' of this checkout")
    return sorted({e for group in found for e in group.split(",")})


def slim_options(folder: str) -> list[str] | None:
    """The options the image's build runs containers/slim_site_packages.py with; None when it does not run it."""
    text = Image(folder, "").dockerfile
    match = re.search(r"python3?\s+\S*slim_site_packages\.py\s+\S+((?:[ \t]+--[\w-]+)*)", text)
    return match[1].split() if match else None


def variant_install(image: Image) -> tuple[list[str], bool]:
    """(requirements, from PyPI alone) of the ``pip install`` in the image's ``case "$VARIANT"`` arm."""
    if not image.variant:
        return [], False
    arm = re.search(rf"(?<![\w-]){re.escape(image.variant)}\) (.*?) ;;", image.dockerfile)
    if arm is None:
        raise SystemExit(f"containers/{image.folder}/Dockerfile has no `{image.variant})` arm of its VARIANT case")
    words = shlex.split(arm[1])
    if words[:2] != ["pip", "install"]:
        raise SystemExit(f"containers/{image.folder}/Dockerfile: the {image.variant} arm runs {arm[1]!r}")
    requirements, cpu_index, it = [], False, iter(words[2:])
    for word in it:
        if word in ("-c", "--constraint", "--index-url", "-i", "--extra-index-url"):
            cpu_index |= next(it, "") == CPU_INDEX
        elif not word.startswith("-"):
            requirements.append(word)
    if cpu_index:  # the CPU index's build, by its local version label
        requirements = [f"{r}+cpu" if re.fullmatch(r"torch==[\d.]+", r) else r for r in requirements]
    return requirements, image.variant == "cuda"


def checked_imports(folder: str) -> list[str]:
    """The modules the Dockerfile's final check imports (``python -c "import a, b as c; ..."``)."""
    found = re.findall(r"python3?\s+-c\s+\"import ([^;\"]+)", Image(folder, "").dockerfile)
    if not found:
        raise SystemExit(f"containers/{folder}/Dockerfile never checks an import of its steps' modules")
    return [m.split(" as ")[0].strip() for line in found for m in line.split(",")]


def horovod_framework(folder: str) -> str | None:
    """The framework a Horovod image builds Horovod with (torch or tf); None for other images."""
    if "horovod" not in image_extras(folder):
        return None
    extras = set(image_extras(folder))
    (framework,) = extras & set(HOROVOD_LIBS)
    return framework


# Not part of the package's source: a build from the checkout itself would reuse a stale build/ folder.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", ".pyshim", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "runs", "local_outputs"
)


def requirement_set(image: Image, source: Path = ROOT) -> list[str]:
    return [f"{source}[{','.join(image_extras(image.folder))}]", *variant_install(image)[0]]


def digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for name in ("pyproject.toml", "setup.py", "constraints.txt"):
        h.update((ROOT / name).read_bytes())
    for part in parts:
        h.update(part if isinstance(part, bytes) else part.encode())
    return h.hexdigest()[:16]


def pip_env(pypi_only: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pypi_only:  # no config file (local indexes, find-links, constraints), no local wheels: PyPI alone
        env = {k: v for k, v in env.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    return env


class WheelUnavailable(RuntimeError):
    """The image's variant asks for a build no index pip reaches here serves: PyTorch's CPU build (``+cpu``) comes
    from PyTorch's own index only, and where pip reaches PyPI alone, PyPI's torch for x86_64 Linux is the CUDA
    build. The image builds where its Dockerfile's index is reachable; it cannot be reproduced on this machine."""


def _unavailable(requirements: list[str], stderr: str) -> list[str]:
    """The ``+cpu`` requirements pip's error names as the ones it could not install."""
    return [r for r in requirements if r.endswith("+cpu") and f"Cannot install {r}" in stderr]


def install_raw(image: Image) -> Path:
    """The image's requirement set installed with ``pip install --target`` (cached)."""
    requirements = requirement_set(image)
    pypi_only = variant_install(image)[1]
    key = digest("\n".join(r.replace(str(ROOT), ".") for r in requirements), f"pypi_only={pypi_only}")
    target = CACHE / f"raw-{image.key}-{key}"
    if (target / ".complete").exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix=f".{image.key}-") as tmp:
        work, source = Path(tmp) / "site", Path(tmp) / "source"
        shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target", str(work)]
        if pypi_only:
            cmd += ["--index-url", PYPI, "--no-cache-dir"]  # GBs of CUDA wheels: not a second copy in pip's cache
        cmd += ["-c", str(ROOT / "constraints.txt"), *requirement_set(image, source)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=pip_env(pypi_only))
        if proc.returncode != 0:
            missing = _unavailable(requirements, proc.stderr)
            if missing:
                raise WheelUnavailable(
                    f"{image.name}: {', '.join(missing)} is served by PyTorch's CPU index ({CPU_INDEX}) alone, "
                    "which pip does not reach here (PyPI's torch for x86_64 Linux is the CUDA build)"
                )
            raise RuntimeError(f"pip install for {image.name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        (work / ".complete").write_text("\n".join(requirements))
        shutil.rmtree(target, ignore_errors=True)
        work.rename(target)
    drop_older_keys(target, f"raw-{image.key}-")
    return target


def drop_older_keys(target: Path, prefix: str) -> None:
    """Remove the installs of the same set under other keys: each is GBs, and a changed requirement set would
    otherwise leave one more on the disk with every change."""
    for other in CACHE.glob(f"{prefix}*"):
        if other != target and re.fullmatch(r"[0-9a-f]+", other.name[len(prefix) :]):
            shutil.rmtree(other, ignore_errors=True)


def install(image: Image | str, keep_raw: bool = True) -> Path:
    """The folder the image's requirement set is installed in, slimmed as its build slims it (cached)."""
    image = by_key(image) if isinstance(image, str) else image
    slim = slim_options(image.folder)
    requirements = requirement_set(image)
    key = digest("\n".join(r.replace(str(ROOT), ".") for r in requirements), SLIM.read_bytes(), f"slim {slim}", "v3")
    target = CACHE / f"{image.key}-{key}"
    if (target / COMPLETE).exists():
        return target
    raw = install_raw(image)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix=f".{image.key}-slim-") as tmp:
        work = Path(tmp) / "site"
        shutil.copytree(raw, work, symlinks=True)
        (work / ".complete").unlink()
        if slim is not None:
            subprocess.run([sys.executable, str(SLIM), str(work), *slim], check=True, stdout=subprocess.DEVNULL)
        (work / COMPLETE).write_text(json.dumps({"requirements": requirements, "raw_mb": size_mb(raw)}))
        shutil.rmtree(target, ignore_errors=True)
        work.rename(target)
    if not keep_raw:
        shutil.rmtree(raw, ignore_errors=True)
    drop_older_keys(target, f"{image.key}-")
    return target


def horovod_files(framework: str, slim: list[str] | None) -> Path | None:
    """Horovod's files for one framework, from the test venv's cached wheel (both frameworks), the other
    framework's library left out, slimmed as the image slims its venv (cached); None without a cached wheel."""
    wheels = sorted(WHEELS.glob("horovod-*/horovod-*.whl"))
    if not wheels:
        return None
    wheel = wheels[-1]
    target = CACHE / f"horovod-{framework}-{digest(wheel.name, SLIM.read_bytes(), f'slim {slim}', 'v3')}"
    if (target / COMPLETE).exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix=".horovod-") as tmp:
        work = Path(tmp) / "site"
        with zipfile.ZipFile(wheel) as archive:
            others = [lib for fw, lib in HOROVOD_LIBS.items() if fw != framework]
            archive.extractall(work, [n for n in archive.namelist() if not n.startswith(tuple(others))])
        # As pip installs a wheel: bytecode compiled.
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(work)], check=True, stdout=subprocess.DEVNULL)
        raw_mb = size_mb(work)
        if slim is not None:
            subprocess.run([sys.executable, str(SLIM), str(work), *slim], check=True, stdout=subprocess.DEVNULL)
        (work / COMPLETE).write_text(json.dumps({"wheel": wheel.name, "raw_mb": raw_mb}))
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


def run_isolated(path: list[Path], modules: list[str], own: list[str]) -> tuple[float, float]:
    """(seconds to import ``modules``, of which ``own``) in a fresh ``python -S`` whose path is ``path`` alone."""
    proc = subprocess.run(
        [sys.executable, "-S", "-c", IMPORT_TIMER, ":".join(map(str, path)), ",".join(modules), ",".join(own)],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"TF_CPP_MIN_LOG_LEVEL": "2"},
        cwd=tempfile.gettempdir(),
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"importing {modules} from {path[1:]} failed:\n{proc.stderr[-3000:]}")
    total, own_s = (float(v) for v in proc.stdout.split()[-2:])
    return total, own_s


def measure(key: str, repeat: int, keep_raw: bool = True) -> dict[str, Any]:
    image = by_key(key)
    target = install(image, keep_raw=keep_raw)
    path = [ROOT, target]
    size = size_mb(target)
    framework = horovod_framework(image.folder)
    horovod_mb = horovod_raw_mb = None
    checked = checked_imports(image.folder)
    if framework is not None:
        hvd = horovod_files(framework, slim_options(image.folder))
        if hvd is not None:
            horovod_mb = size_mb(hvd)
            horovod_raw_mb = json.loads((hvd / COMPLETE).read_text())["raw_mb"]
            path.append(hvd)
        else:  # no cached build: the check imports what the image's own set holds
            checked = [m for m in checked if not m.startswith("horovod")]
    run_isolated(path, checked, [])  # the image's steps load in the slimmed set (a failure raises)
    modules = ENTRY_POINTS[image.folder]
    own = OWN_MODULES.get(image.folder, [])
    times = [run_isolated(path, modules, own) for _ in range(repeat)]
    return {
        "image": image.name,
        "folder": image.folder,
        "variant": image.variant,
        "extras": image_extras(image.folder),
        "requirements": [r.replace(str(ROOT), ".") for r in requirement_set(image)],
        "from_pypi_only": variant_install(image)[1],
        "slim_options": slim_options(image.folder),
        "size_mb": size,
        "raw_mb": json.loads((target / COMPLETE).read_text())["raw_mb"],
        "horovod_mb": horovod_mb,
        "horovod_raw_mb": horovod_raw_mb,
        "largest": largest(target),
        "checked_imports": checked,
        "entry": modules,
        "import_s": [t for t, _ in times],
        "own_import_s": [o for _, o in times] if own else [],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", default=",".join(i.key for i in images()))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep-raw", action="store_true", help="keep the unslimmed installs (GBs) for reuse")
    parser.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    results = {}
    for key in [k.strip() for k in args.images.split(",") if k.strip()]:
        entry = results[key] = measure(key, args.repeat, keep_raw=args.keep_raw)
        extra = f" + Horovod {entry['horovod_mb']:.0f} MB" if entry["horovod_mb"] else ""
        median = statistics.median(entry["import_s"])
        print(f"{key}: {entry['size_mb']:.0f} MB{extra}, import {median:.2f} s", flush=True)
    Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
