"""Untrusted manifests through the ``kftrain`` command (kftrain/job/manifest/parse.py reads YAML within bounds):
each bad one is refused before anything runs, with one line naming the file, line or field, and exit code 2;
never a traceback, never a hang on a small input; what kubectl accepts still loads.

Every case runs through ``kftrain validate`` and ``kftrain launch --dry-run`` (the command's own
``main``, as the installed ``kftrain`` runs it): an exception that escaped would fail the test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from kftrain.cli.app import main
from kftrain.job import load_manifest
from kftrain.job.manifest.parse import MAX_MANIFEST_BYTES
from testbed.manifests import as_yaml, pytorchjob, replica

GOOD = pytorchjob({"Master": replica(1, "pytorch", ["python", "-c", "pass"])}, name="good")


def _with(edit: Callable[[dict], None]) -> bytes:
    manifest = json.loads(json.dumps(GOOD))
    edit(manifest)
    return as_yaml(manifest).encode()


def _container(manifest: dict) -> dict:
    return manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]


def _replace(text: str, old: str, new: str) -> bytes:
    assert old in text, old
    return text.replace(old, new, 1).encode()


GOOD_TEXT = as_yaml(GOOD)

BILLION_LAUGHS = (
    "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: bomb}\n"
    "x: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    + "".join(f"x{i}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))
    + "spec:\n  pytorchReplicaSpecs:\n    Master:\n      template:\n        spec:\n          containers:\n"
    "          - name: pytorch\n            command: *i\n"
)


@dataclass(frozen=True)
class Case:
    name: str
    # The file's bytes, or what makes them: a large case is built when its test runs, not at collection.
    content: bytes | Callable[[], bytes]
    fragment: str  # what the one-line message must say (the field, file position or reason)

    def data(self) -> bytes:
        return self.content() if callable(self.content) else self.content


def _cases() -> list[Case]:
    return [
        Case(
            "non-utf8",
            b"apiVersion: kubeflow.org/v1\nkind: \xff\xfeTFJob\n",
            "not UTF-8 text: byte 0xff at line 2 (offset 34",
        ),
        Case("nesting-20000", b"[" * 20_000 + b"]" * 20_000, "nested more than 100 levels deep"),
        Case("billion-laughs", BILLION_LAUGHS.encode(), "expands to more than 1000000 nodes"),
        Case("recursive-alias", _replace(GOOD_TEXT, "command:\n", "command: &loop [*loop]\n  x:\n"), "recursive alias"),
        Case("int-and-str-top-keys", GOOD_TEXT.encode() + b"1: one\n", "mapping key 1 at line"),
        Case(
            "int-key-in-labels",
            _replace(GOOD_TEXT, "name: good\n", "name: good\n  labels: {1: a, b: c}\n"),
            "mapping key 1",
        ),
        Case(
            "duplicate-yaml-key",
            _replace(GOOD_TEXT, "name: good\n", "name: good\n  name: other\n"),
            "duplicate key 'name'",
        ),
        Case(
            "deadline-10e400",
            _with(lambda m: m["spec"].update(runPolicy={"activeDeadlineSeconds": 10**400})),
            "spec.runPolicy.activeDeadlineSeconds: an integer of 1329 bits is outside the int64 range",
        ),
        Case(
            "int-of-5000-digits",
            _replace(GOOD_TEXT, "replicas: 1", "replicas: " + "9" * 5000),
            "cannot read the value at line",
        ),
        Case(
            "replicas-10e30",
            _with(lambda m: m["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=10**30)),
            "spec.pytorchReplicaSpecs.Master.replicas: 1000000000000000000000000000000 is outside the int32 range",
        ),
        Case(
            "replicas-2e31",
            _with(lambda m: m["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2**31)),
            "spec.pytorchReplicaSpecs.Master.replicas: 2147483648 is outside the int32 range",
        ),
        Case(
            "backoff-limit-int32",
            _with(lambda m: m["spec"].update(runPolicy={"backoffLimit": 2**40})),
            "spec.runPolicy.backoffLimit: 1099511627776 is outside the int32 range",
        ),
        Case(
            "deadline-infinite",
            _with(lambda m: m["spec"].update(runPolicy={"activeDeadlineSeconds": float("inf")})),
            "spec.runPolicy.activeDeadlineSeconds: expected an integer, got float inf",
        ),
        Case(
            "5MB-50k-env",
            lambda: _with(
                lambda m: _container(m).update(env=[{"name": f"VAR_{i}", "value": "x" * 80} for i in range(50_000)])
            ),
            f"more than the {MAX_MANIFEST_BYTES} bytes the Kubernetes API server accepts",
        ),
        Case(
            "name-trailing-newline",
            _with(lambda m: m["metadata"].update(name="job\n")),
            "metadata.name: 'job\\n' must be",
        ),
        Case("name-upper", _with(lambda m: m["metadata"].update(name="Job")), "metadata.name: 'Job' must be"),
        Case(
            "generate-name-bad",
            _with(lambda m: m.update(metadata={"generateName": "Bad_Prefix-"})),
            "metadata.generateName: 'Bad_Prefix-' must be",
        ),
        Case(
            "generate-name-long",
            _with(lambda m: m.update(metadata={"generateName": "a" * 59})),
            "metadata.generateName: " + repr("a" * 59) + " must be",
        ),
        Case(
            "duplicate-env-name",
            _with(lambda m: _container(m).update(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}])),
            "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].env[1].name: 'A' is already set by",
        ),
        Case(
            "env-name-with-equals",
            _with(lambda m: _container(m).update(env=[{"name": "A=B", "value": "1"}])),
            "containers[0].env[0].name: 'A=B' is not a valid variable name",
        ),
        Case(
            "env-value-with-nul",
            _with(lambda m: _container(m).update(env=[{"name": "A", "value": "x\0y"}])),
            "containers[0].env[0].value: A: contains a NUL character",
        ),
        Case(
            "command-with-nul",
            _with(lambda m: _container(m).update(command=["python", "-c", "pass\0"])),
            "containers[0].command[2]: contains a NUL character",
        ),
        Case(
            "two-documents",
            GOOD_TEXT.encode() + b"---\n" + GOOD_TEXT.encode(),
            "expected exactly one job among its 2 YAML documents",
        ),
        Case("empty-file", b"", "expected exactly one YAML document, found 0"),
        Case("a-list", b"- 1\n- 2\n", "a manifest must be a mapping, got list"),
        Case("unclosed-bracket", b"apiVersion: [kubeflow.org/v1\n", "malformed YAML at line 2"),
        Case("control-character", b"apiVersion: kubeflow.org/v1\x07\n", "malformed YAML"),
        Case(
            "replicas-float",
            _with(lambda m: m["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=1.5)),
            "expected an integer",
        ),
    ]


CASES = _cases()


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", [["validate", "-f"], ["launch", "--dry-run", "-f"]], ids=["validate", "dry-run"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_manifest_is_one_clear_line_and_exit_2(case: Case, command: list[str], tmp_path: Path, capsys) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(case.data())
    started = time.monotonic()
    code, out, err = _run([*command, str(path)], capsys)
    assert time.monotonic() - started < 20, "a small input must not cost this much"
    assert code == 2, (out, err)
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("kftrain: error: "), err
    assert case.fragment in lines[0], lines[0]
    assert len(lines[0]) < 600, lines[0]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["validate", "-f", "{missing}"], "cannot read manifest: No such file or directory"),
        (["validate", "-f", "{folder}"], "cannot read manifest: a directory, not a regular file"),
        (["launch", "--dry-run", "--name", "job\n", "-f", "{good}"], "metadata.name: 'job\\n' must be"),
        (["validate", "--crd-dir", "{missing}", "-f", "{good}"], "--crd-dir: CRD folder not found"),
        (["validate", "--crd-dir", "{bad_crds}", "-f", "{good}"], "not a readable CustomResourceDefinition"),
    ],
    ids=["missing-file", "folder-as-file", "name-override", "crd-dir-missing", "crd-dir-garbage"],
)
def test_bad_paths_and_overrides(args: list[str], fragment: str, tmp_path: Path, capsys) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(GOOD_TEXT)
    bad_crds = tmp_path / "crds"
    bad_crds.mkdir()
    (bad_crds / "x.yaml").write_text("kind: CustomResourceDefinition\nspec: [1, 2]\n")
    paths = {"missing": tmp_path / "nope.yaml", "folder": tmp_path, "good": good, "bad_crds": bad_crds}
    code, out, err = _run([a.format(**paths) for a in args], capsys)
    assert code == 2, (out, err)
    assert len(err.splitlines()) == 1 and fragment in err, err


# --- what must still be accepted ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        GOOD_TEXT,
        # anchors and merge keys are YAML, and kubectl reads them: a modest use is fine
        GOOD_TEXT.replace("name: good\n", "name: good\n  labels: &l {team: a}\n  annotations: *l\n", 1),
        GOOD_TEXT.replace("name: good\n", "name: good\n  labels: &l {team: a}\n  annotations: {<<: *l, team: b}\n", 1),
        _with(lambda m: m.update(metadata={"generateName": "digits-"})).decode(),
    ],
    ids=["plain", "alias", "merge-key", "generate-name"],
)
def test_good_manifests_still_load(content: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(content)
    code, out, err = _run(["validate", "-f", str(path)], capsys)
    assert code == 0, err
    assert "valid PyTorchJob" in out


def test_manifest_just_under_the_size_limit_loads(tmp_path: Path) -> None:
    manifest = json.loads(json.dumps(GOOD))
    _container(manifest)["env"] = [{"name": f"V{i}", "value": "x" * 40} for i in range(20_000)]
    text = as_yaml(manifest)
    assert 0.5 * MAX_MANIFEST_BYTES < len(text) < MAX_MANIFEST_BYTES
    assert len(load_manifest(text).replica_specs["Master"].template.spec.containers[0].env or []) == 20_000
