"""TrainJob runtimes files (kftrain/job/kinds/trainjob/catalog.py, runtime.py; kftrain/job/manifest/parse.py): an alias
bomb, a FIFO, /dev/zero, duplicate keys, an 8 MiB file, a runtime named Bad_Name, a dependsOn cycle, a dependsOn on a
missing job, each given every way a user gives one, and the same runtimes carried in the job's own file.

The bad files are tests/job/kinds/trainjob/test_runtimes_files.py's ``CASES`` (built with testbed.manifests'
``training_runtime`` and ``replicated_job``, and the alias bomb), taken by name when the case runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.hostile.case import CLEAR, FINE, WRONG, Case, Observed, Sandbox
from testbed.manifests import RUNTIME

AREA = "runtimes"
# The bad files of test_runtimes_files.CASES, and what the error must name beside the file.
BAD = {
    "alias-bomb": "aliases",
    "fifo": "named pipe",
    "dev-zero": "character device",
    "8MiB": "3145728 bytes",
    "duplicate-mlPolicy": "duplicate key 'mlPolicy'",
    "Bad_Name": "metadata.name",
    "dependsOn-cycle": "cycle",
    "dependsOn-missing": "ghost",
}


def _tests() -> Any:
    from tests.job.kinds.trainjob import test_runtimes_files

    return test_runtimes_files


def _bad_file(sb: Sandbox, key: str) -> Path:
    made: Path = next(c for c in _tests().CASES if c.name == key).make(sb.work)
    return made


def _job_file(sb: Sandbox, command: list[str] | None = None) -> Path:
    from testbed.manifests import as_yaml, trainjob

    return sb.write("trainjob.yaml", as_yaml(trainjob(RUNTIME, trainer={"command": command or ["true"]})))


def _validate_flag(sb: Sandbox, path: Path) -> int:
    return sb.cli("validate", "-f", _job_file(sb), "--runtimes", path)


def _validate_env(sb: Sandbox, path: Path) -> int:
    os.environ["KFTRAIN_TRAINER_RUNTIMES"] = str(path)
    return sb.cli("validate", "-f", _job_file(sb))


def _dry_run(sb: Sandbox, path: Path) -> int:
    return sb.cli("launch", "-f", _job_file(sb), "--dry-run", "--runtimes", path)


def _convert(sb: Sandbox, path: Path) -> int:
    from testbed.manifests import as_yaml, pytorchjob

    job = sb.write("pytorchjob.yaml", as_yaml(pytorchjob({"Master": 1}, name="pt")))
    return sb.cli("convert", "-f", job, "--runtime", RUNTIME, "--runtimes", path)


WAYS: dict[str, tuple[str, Callable[[Sandbox, Path], int]]] = {
    "validate --runtimes": ("kftrain validate -f JOB --runtimes FILE", _validate_flag),
    "KFTRAIN_TRAINER_RUNTIMES": ("KFTRAIN_TRAINER_RUNTIMES=FILE kftrain validate -f JOB", _validate_env),
    "launch --dry-run": ("kftrain launch -f JOB --dry-run --runtimes FILE", _dry_run),
}


def _given(key: str, way: Callable[[Sandbox, Path], int]) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        return way(sb, _bad_file(sb, key))

    return run


def _carried(key: str) -> Callable[[Sandbox], int]:
    """The bad runtime in the job's own file, as kubectl apply -f takes Trainer's examples 04 and 05."""

    def run(sb: Sandbox) -> int:
        runtime = _bad_file(sb, key)
        job = _job_file(sb)
        carried = sb.write("carried.yaml", job.read_text() + "---\n" + runtime.read_text())
        runtime.unlink()
        return sb.cli("validate", "-f", carried)

    return run


def _launch_runs_nothing(key: str) -> Callable[[Sandbox], int]:
    """kftrain launch --local on such a runtime: refused before any node runs (a node that ran leaves its file)."""

    def run(sb: Sandbox) -> int:
        runtime = _bad_file(sb, key)
        ran = sb.work / "ran"
        job = _job_file(sb, [sys.executable, "-c", f"open({str(ran)!r}, 'w')"])
        code = sb.cli("launch", "--local", "--workdir", sb.work / "wd", "-f", job, "--runtimes", runtime)
        if ran.exists() or (sb.work / "wd").exists():
            raise Observed(WRONG, "a node of the job ran (or its work folder was made) before the refusal")
        return code

    return run


def _good(sb: Sandbox) -> int:
    from testbed.manifests import as_yaml, training_runtime

    path = sb.write("runtime.yaml", as_yaml(training_runtime()))
    return _validate_flag(sb, path)


def _fifo_in_a_folder(sb: Sandbox) -> int:
    (sb.work / "rts").mkdir()
    os.mkfifo(sb.work / "rts" / "pipe.yaml")
    return _validate_flag(sb, sb.work / "rts")


def _file(text: str | bytes) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        return _validate_flag(sb, sb.write("runtime.yaml", text))

    return run


def _missing_flag(sb: Sandbox) -> int:
    return _validate_flag(sb, sb.work / "none.yaml")


def _missing_env(sb: Sandbox) -> int:
    return _validate_env(sb, sb.work / "none.yaml")


def _a_job_not_a_runtime(sb: Sandbox) -> int:
    return _validate_flag(sb, _job_file(sb))


CASES: list[Case] = []
ENV_WAY = ("alias-bomb", "fifo", "Bad_Name")  # the variable is read as --runtimes is: three of the eight
for _key, _names in BAD.items():
    for _way, (_surface, _call) in WAYS.items():
        if _way == "KFTRAIN_TRAINER_RUNTIMES" and _key not in ENV_WAY:
            continue
        if _way == "launch --dry-run" and _key in ("dev-zero", "8MiB", "duplicate-mlPolicy"):
            continue
        CASES.append(
            Case(AREA, f"{_key} ({_way})", CLEAR, _surface, _given(_key, _call), names=(_names,), timeout_s=45)
        )
    if _key in ("alias-bomb", "Bad_Name", "dependsOn-cycle"):
        CASES.append(
            Case(
                AREA,
                f"{_key} (in the job's file)",
                CLEAR,
                "kftrain validate -f JOB+RUNTIME",
                _carried(_key),
                names=(_names,),
                timeout_s=45,
            )
        )
for _key in ("dependsOn-cycle", "dependsOn-missing"):
    CASES.append(
        Case(
            AREA,
            f"{_key} (launch --local)",
            CLEAR,
            "kftrain launch --local --runtimes FILE",
            _launch_runs_nothing(_key),
            names=(BAD[_key],),
        )
    )
CASES += [
    Case(
        AREA,
        "Bad_Name (convert --runtimes)",
        CLEAR,
        "kftrain convert --runtimes FILE",
        lambda sb: _convert(sb, _bad_file(sb, "Bad_Name")),
        names=("metadata.name",),
    ),
    Case(
        AREA,
        "a FIFO in a runtimes folder",
        CLEAR,
        "kftrain validate --runtimes DIR",
        _fifo_in_a_folder,
        names=("pipe.yaml", "named pipe"),
        timeout_s=45,
    ),
    Case(
        AREA,
        "a missing path (--runtimes)",
        CLEAR,
        "kftrain validate --runtimes FILE",
        _missing_flag,
        names=("--runtimes", "none.yaml"),
    ),
    Case(
        AREA,
        "a missing path (KFTRAIN_TRAINER_RUNTIMES)",
        CLEAR,
        "KFTRAIN_TRAINER_RUNTIMES",
        _missing_env,
        names=("KFTRAIN_TRAINER_RUNTIMES", "none.yaml"),
    ),
    Case(
        AREA,
        "a TrainJob given as a runtime",
        CLEAR,
        "kftrain validate --runtimes FILE",
        _a_job_not_a_runtime,
        names=(RUNTIME, "--runtimes"),
    ),
    Case(
        AREA,
        "an empty file (the job's runtime then unknown)",
        CLEAR,
        "kftrain validate --runtimes FILE",
        _file(""),
        names=(RUNTIME,),
    ),
    Case(AREA, "a good runtime (control)", FINE, "kftrain validate --runtimes FILE", _good),
]
