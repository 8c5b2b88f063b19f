"""Every YAML file a user gives kftrain is read one way (kftrain/job/manifest/parse.py, read_yaml_file): a path that
is not a regular file is refused without waiting on it, the size is bounded, a repeated key and an alias bomb are
refused, each in one line naming the file, with exit code 2 from the command line (kftrain/cli/app.py).

The readers: a job manifest (``kftrain validate -f``), a CRD file (``--crd-dir``), a parameters file
(``kftrain run --params-file``) and a compiled pipeline (``kftrain submit``'s package); TrainJob runtimes files have
their own cases beside their code (tests/job/kinds/trainjob/test_runtimes_files.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from kftrain.cli.app import main
from kftrain.cli.kfp.package import resolve_package
from kftrain.errors import KftrainError
from kftrain.job.manifest.parse import PIPELINE, read_yaml_file
from testbed.manifests import as_yaml, pytorchjob, replica
from testbed.named_pipes import within

GOOD_JOB = as_yaml(pytorchjob({"Master": replica(1, "pytorch", ["python", "-c", "pass"])}, name="good"))
API_LIMIT = 3 * 1024 * 1024


@dataclass(frozen=True)
class Reader:
    name: str
    what: str  # what its messages call the file
    limit: int  # the most bytes it reads
    file_name: str  # the name the file is given (a CRD folder takes *.yaml)
    source: str  # how its messages name the file: {path} for the file's path
    one_line: Callable[[Path, Path, pytest.CaptureFixture[str]], str]  # (file, test folder) -> the error's line


def _cli(args: list[str], capsys: pytest.CaptureFixture[str], pipe: Path) -> str:
    code = within(20, pipe, lambda: main(args))
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    assert err.startswith("kftrain: error: ") and err.count("\n") == 1, err
    return err[len("kftrain: error: ") : -1]


def _manifest(path: Path, folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    return _cli(["validate", "-f", str(path)], capsys, path)


def _crds(path: Path, folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    job = folder.parent / "job.yaml"
    job.write_text(GOOD_JOB)
    return _cli(["validate", "-f", str(job), "--crd-dir", str(folder)], capsys, path)


def _params(path: Path, folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    return _cli(["run", "--params-file", str(path)], capsys, path)


def _pipeline(path: Path, folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    raised = within(20, path, lambda: resolve_package(str(path)))
    assert isinstance(raised, KftrainError), raised
    return str(raised)


READERS = [
    Reader("manifest", "manifest", API_LIMIT, "job.yaml", "{path}", _manifest),
    Reader("crd-dir", "CRD file", API_LIMIT, "crd.yaml", "{path}", _crds),
    Reader("params-file", "parameters file", API_LIMIT, "params.yaml", "--params-file {path}", _params),
    Reader("pipeline", "pipeline file", 32 * 1024 * 1024, "pipeline.yaml", "{path}", _pipeline),
]


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[Path], object]  # makes the file at this path
    message: str  # after the file's name; {what} and {limit} are the reader's
    regular_only: bool = False  # a reader may refuse a path that is no file before it reads (kftrain submit)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    path.symlink_to("/dev/zero")  # stat follows the link: the reader sees the device


def _oversized(path: Path) -> None:
    with open(path, "wb") as handle:  # sparse: its size is all the reader may look at
        handle.truncate(40 * 1024 * 1024)


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
)
CASES = [
    Case("fifo", _fifo, "cannot read {what}: a named pipe (FIFO), not a regular file"),
    Case("dev-zero", _dev_zero, "cannot read {what}: a character device, not a regular file"),
    Case("directory", lambda path: path.mkdir(), "cannot read {what}: a directory, not a regular file"),
    Case(
        "40MiB",
        _oversized,
        "the {what} is 41943040 bytes, more than the {limit} bytes {why}",
        regular_only=True,
    ),
    Case(
        "duplicate-key",
        lambda path: path.write_text("a: 1\nb: 2\na: 3\n"),
        "duplicate key 'a' at line 3, column 1 (first at line 1); kubectl refuses it, and only the last value "
        "would count",
        regular_only=True,
    ),
    Case(
        "alias-bomb",
        lambda path: path.write_text(BOMB),
        "expands to more than 1000000 nodes through its aliases (*name) at line 6, column 4",
        regular_only=True,
    ),
]
WHY = {
    "manifest": "the Kubernetes API server accepts for an object",
    "CRD file": "the Kubernetes API server accepts for an object",
    "parameters file": "kftrain reads of one (a manifest's bound)",
    "pipeline file": "the KFP API server reads of a pipeline",
}


# kftrain submit refuses a path that is no file before it reads (kftrain/cli/reference.py): its reader is given those
# directly, below.
PAIRS = [(r, c) for r in READERS for c in CASES if r.name != "pipeline" or c.regular_only]


@pytest.mark.parametrize(("reader", "case"), PAIRS, ids=[f"{r.name}-{c.name}" for r, c in PAIRS])
def test_each_reader_refuses_it_in_one_line(
    reader: Reader, case: Case, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "files"
    folder.mkdir()
    path = folder / reader.file_name
    case.make(path)
    line = reader.one_line(path, folder, capsys)
    message = case.message.format(what=reader.what, limit=reader.limit, why=WHY[reader.what])
    assert line == f"{reader.source.format(path=path)}: {message}"


@pytest.mark.parametrize("case", [c for c in CASES if not c.regular_only], ids=lambda c: c.name)
def test_the_pipeline_reader_refuses_what_is_no_file(case: Case, tmp_path: Path) -> None:
    """What ``kftrain submit`` never hands it, the reader refuses itself."""
    path = tmp_path / "pipeline.yaml"
    case.make(path)
    raised = within(20, path, lambda: read_yaml_file(path, PIPELINE))
    assert str(raised) == f"{path}: {case.message.format(what='pipeline file')}"


def test_what_kftrain_reads_is_unchanged(tmp_path: Path) -> None:
    """The control: the files kftrain itself ships read as before, JSON included."""
    repo = Path(__file__).resolve().parents[3]
    package = resolve_package(str(repo / "pipelines/training/pytorch_digits/pipeline.yaml"))
    assert {"epochs", "workers"} <= (package.parameters or set())
    as_json = tmp_path / "params.json"
    as_json.write_text('{"epochs": 3, "command": ["python", "train.py"]}')
    from kftrain.cli.params import read_params_file

    assert read_params_file(str(as_json)) == {"epochs": 3, "command": ["python", "train.py"]}
