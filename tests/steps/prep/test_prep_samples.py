"""The builtin: samples: a table baked as Parquet is the one scikit-learn builds; prep reads a baked one without
scikit-learn; with neither, one line names the extra; and the data image's slimmed environment (the one P8
measures) runs prep on a baked sample."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kftrain.steps.prep.samples import NAMES, SAMPLES_DIR_ENV, bake, build, sample_table
from testbed import REPO_ROOT
from testbed.scripts import load_script

ROOT = REPO_ROOT
DIGITS_ROWS = {"train": 1259, "validation": 179, "test": 359}  # 1,797 rows split 0.7 / 0.1 / 0.2 by class

# Runs prep on builtin:digits in a fresh interpreter where scikit-learn and scipy cannot be imported.
PREP_WITHOUT_SKLEARN = textwrap.dedent(
    """
    import json, sys
    sys.modules.update({name: None for name in ("sklearn", "scipy")})  # None in sys.modules: not installed
    from kftrain.steps.prep import prepare_dataset
    info = prepare_dataset(sys.argv[1], source="builtin:digits")
    print(json.dumps({"rows": info.rows, "classes": info.classes, "sklearn": sys.modules.get("sklearn") is not None}))
    """
)


@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("samples")
    written = bake(folder)
    assert sorted(p.name for p in written) == sorted(f"{n}.parquet" for n in NAMES)
    return folder


@pytest.mark.parametrize("name", NAMES)
def test_a_baked_sample_is_the_table_scikit_learn_builds(
    name: str, baked: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SAMPLES_DIR_ENV, str(baked))
    read, built = sample_table(name), build(name)
    assert read.equals(built)  # names, types and values, column by column
    assert read.column_names[-1] == "label" and read.num_rows > 100


def run_prep(tmp_path: Path, env: dict[str, str], python_path: list[str] | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", PREP_WITHOUT_SKLEARN, str(tmp_path / "dataset")]
    if python_path is not None:  # an installed environment alone: `python -S`, its folder and this checkout
        command = [sys.executable, "-S", "-c", f"import sys; sys.path[:0] = {python_path!r}\n" + PREP_WITHOUT_SKLEARN]
        command.append(str(tmp_path / "dataset"))
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)


def test_prep_reads_a_baked_sample_without_scikit_learn(tmp_path: Path, baked: Path) -> None:
    proc = run_prep(tmp_path, {**os.environ, SAMPLES_DIR_ENV: str(baked)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen == {"rows": DIGITS_ROWS, "classes": list(range(10)), "sklearn": False}


@pytest.mark.parametrize("samples_dir", ["", "empty"])
def test_without_a_baked_sample_or_scikit_learn_one_line_names_the_extra(tmp_path: Path, samples_dir: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != SAMPLES_DIR_ENV}
    if samples_dir:
        (tmp_path / samples_dir).mkdir()
        env[SAMPLES_DIR_ENV] = str(tmp_path / samples_dir)
    proc = run_prep(tmp_path, env)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    where = f" (not baked in ${SAMPLES_DIR_ENV})" if samples_dir else ""
    assert last.endswith(
        f"source builtin:digits{where} needs the 'sklearn' package, which kftrain's [samples] extra installs: "
        "pip install 'kftrain[samples]'"
    ), proc.stderr[-2000:]
    assert not (tmp_path / "dataset").exists()  # nothing written


@pytest.mark.slow  # installs the data image's requirement set with pip (cached after the first run)
def test_the_data_images_slimmed_environment_prepares_a_baked_sample(tmp_path: Path, baked: Path) -> None:
    bench_images = load_script("bench/bench_images.py", "bench_images")
    assert bench_images.slim_options("data") == ["--strip"]  # as containers/data/Dockerfile runs it
    site = bench_images.install("data")  # the image's requirement set, slimmed as its build slims it
    assert not (site / "sklearn").exists() and not (site / "scipy").exists()
    assert not list((site / "pyarrow").glob("libarrow_flight.so*"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {SAMPLES_DIR_ENV: str(baked)}
    proc = run_prep(tmp_path, env, python_path=[str(ROOT), str(site)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1])["rows"] == DIGITS_ROWS
