"""A pipeline reference (kftrain.cli.reference, kftrain.cli.user_module): a shipped name, a compiled file or
MODULE:FUNCTION, the same for ``kftrain run``, ``compile``, ``submit`` and ``schedule``; whatever a user's module does
wrong while it is imported is one line naming it, exit code 2, before anything is created."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from kftrain.cli.app import main
from kftrain.cli.reference import Kind, load_pipeline, parse_reference
from kftrain.errors import KftrainError
from testbed import REPO_ROOT

GOOD = """
from kfp import dsl

@dsl.component(base_image="python:3.11")
def add(a: int, b: int) -> int:
    return a + b

@dsl.pipeline(name="adder")
def adder(a: int, b: int = 2) -> None:
    add(a=a, b=b)
"""
BODY_RAISES = """
from kfp import dsl

@dsl.component(base_image="python:3.11")
def one(a: int) -> int:
    return a

def check(a):
    raise ValueError("the body refused")

@dsl.pipeline(name="p")
def p(a: int = 1) -> None:
    one(a=a)
    check(a)
"""
WRONG_CALL = """
from kfp import dsl

@dsl.component(base_image="python:3.11")
def one(a: int) -> int:
    return a

@dsl.pipeline(name="p")
def p(a: int = 1) -> None:
    one(b=a)
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The user's folder, current; what importing their modules adds to sys.path and sys.modules goes after."""
    mine = tmp_path / "mine"
    mine.mkdir()
    monkeypatch.chdir(mine)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield mine
    for name in set(sys.modules) - before:
        if str(mine) in str(getattr(sys.modules[name], "__file__", "") or ""):
            del sys.modules[name]


def write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(text))


def kftrain_fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """``kftrain ARGV``, which must fail with exit code 2 and one line: that line."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("files", "ref", "params", "message"),
    [
        pytest.param({"syn.py": "def broken(:\n"}, "syn:p", [], "syn:p: syn.py:1: SyntaxError: ", id="syntax-error"),
        pytest.param(
            {"imp_fails.py": "import no_such_package_here\n"},
            "imp_fails:p",
            [],
            "imp_fails:p: importing imp_fails failed at imp_fails.py:1: No module named 'no_such_package_here'",
            id="its-import-fails",
        ),
        pytest.param({}, "../x:p", [], "../x:p: '../x' is not a module name", id="a-path-as-module"),
        pytest.param({}, "../x.py:p", [], "../x.py:p: no file ../x.py", id="a-missing-file"),
        pytest.param({"pkg/__init__.py": ""}, "pkg:p", [], "pkg:p: the module pkg", id="a-package-without-it"),
        pytest.param(
            {"good.py": GOOD}, "good:nothing", [], "has no 'nothing'; its pipelines: adder", id="missing-function"
        ),
        pytest.param(
            {"good2.py": GOOD}, "good2:add", [], "good2:add: not a pipeline (a function decorated", id="a-component"
        ),
        pytest.param(
            {"exits.py": "import sys\n\nsys.exit(0)\n"},
            "exits:p",
            [],
            "exits:p: importing exits called sys.exit(0) at exits.py:3; a pipeline module must not exit",
            id="sys-exit-at-import",
        ),
        pytest.param(
            {"body.py": BODY_RAISES},
            "body:p",
            [],
            "body:p: importing body failed at body.py:9: ValueError: the body refused",
            id="pipeline-body-raises",
        ),
        pytest.param(
            {"wrong_call.py": WRONG_CALL},
            "wrong_call:p",
            [],
            "importing wrong_call failed at wrong_call.py:10: TypeError: one() got an unexpected keyword argument",
            id="a-component-called-wrong",
        ),
        pytest.param(
            {"good3.py": GOOD},
            "good3:adder",
            [],
            "good3:adder: missing parameter(s) a, which have no default: pass --param a=VALUE",
            id="missing-required-parameter",
        ),
        pytest.param(
            {"good4.py": GOOD},
            "good4:adder",
            ["--param", "a=1", "--param", "c=3"],
            "good4:adder: unknown parameter(s) c; the pipeline takes a, b",
            id="unknown-parameter",
        ),
        pytest.param(
            {"good5.py": GOOD},
            "good5:adder",
            ["--param", "a=one"],
            "good5:adder: --param a='one': Argument type 'STRING' is incompatible with the input type",
            id="parameter-of-the-wrong-type",
        ),
        pytest.param(
            {"token.py": GOOD},
            "token:adder",
            [],
            "token is " + str(Path(sys.base_prefix).resolve()),
            id="named-like-a-standard-module",
        ),
        pytest.param(
            {"token.py": GOOD},
            "./token.py:adder",
            [],
            "token is the name of ",
            id="a-file-named-like-a-standard-module",
        ),
        pytest.param({"good6.py": GOOD}, "good6.py", [], "is a Python file: name its pipeline", id="a-py-file-alone"),
        pytest.param({"good7.py": GOOD}, "good7:", [], "after the ':' comes the pipeline's function", id="no-function"),
        pytest.param({"good8.py": GOOD}, "good8", [], "not one of horovod-digits, ", id="a-module-name-alone"),
        pytest.param(
            {"not_kfp.yaml": "just: a mapping\n"},
            "not_kfp.yaml",
            [],
            "not_kfp.yaml: not a compiled KFP pipeline",
            id="a-yaml-file-of-something-else",
        ),
        pytest.param({"broken.yaml": "a: [\n"}, "broken.yaml", [], "broken.yaml: malformed YAML", id="broken-yaml"),
    ],
)
def test_a_pipeline_that_cannot_be_loaded_is_one_line_before_anything_is_created(
    folder: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, str],
    ref: str,
    params: list[str],
    message: str,
) -> None:
    write(folder, files)
    root = tmp_path / "runs"
    err = kftrain_fails(capsys, "run", ref, *params, "--pipeline-root", str(root))
    assert message in err, err
    assert not root.exists()


def test_a_module_name_alone_beside_its_file_is_told_how_to_name_its_pipeline(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(folder, {"good9.py": GOOD})
    assert "(good9:FUNCTION names a pipeline of good9.py)" in kftrain_fails(capsys, "run", "good9")


@pytest.mark.parametrize(
    ("files", "ref"),
    [
        pytest.param({"mine_a.py": GOOD}, "mine_a:adder", id="module-from-the-current-folder"),
        pytest.param({"pkg_b/__init__.py": "", "pkg_b/mod.py": GOOD}, "pkg_b.mod:adder", id="pkg.module"),
        pytest.param({"sub/mine_c.py": GOOD}, "sub/mine_c.py:adder", id="path/to/file.py"),
        pytest.param({"mine_d.py": GOOD}, "{folder}/mine_d.py:adder", id="an-absolute-file"),
    ],
)
def test_a_users_pipeline_loads_from_a_module_or_a_file(folder: Path, files: dict[str, str], ref: str) -> None:
    write(folder, files)
    parsed = parse_reference(ref.format(folder=folder))
    assert parsed.kind is Kind.FUNCTION
    assert load_pipeline(parsed).component_spec.name == "adder"


def test_the_users_folder_goes_after_the_standard_library(folder: Path) -> None:
    """A token.py beside the pipeline does not replace the standard library's token in kftrain."""
    write(folder, {"token.py": "raise RuntimeError('the user token.py was imported')\n", "mine_e.py": GOOD})
    load_pipeline(parse_reference("mine_e:adder"))
    position = sys.path.index(str(folder))
    stdlib = Path(sys.modules["token"].__file__ or "").parent
    assert sys.path.index(str(stdlib)) < position
    assert all("site-packages" not in entry for entry in sys.path[:position])


@pytest.mark.parametrize(
    ("given", "kind"),
    [
        pytest.param("pytorch-digits", Kind.SHIPPED, id="shipped"),
        pytest.param(str(REPO_ROOT / "pipelines/training/pytorch_digits/pipeline.yaml"), Kind.FILE, id="compiled"),
        pytest.param("my_pipeline:my_pipeline", Kind.FUNCTION, id="module-function"),
        pytest.param("path/to/file.py:my_pipeline", Kind.FUNCTION, id="file-function"),
    ],
)
def test_one_resolver_tells_the_three_forms_apart_without_importing(given: str, kind: Kind) -> None:
    assert parse_reference(given).kind is kind


@pytest.mark.parametrize(
    ("given", "message"),
    [
        pytest.param("no-such-pipeline", "unknown pipeline 'no-such-pipeline': not a file, not MODULE:FUNCTION"),
        pytest.param("missing.yaml", "pipeline file missing.yaml does not exist"),
        pytest.param(".", "is a folder"),
    ],
)
def test_a_reference_to_nothing_names_the_three_forms(given: str, message: str) -> None:
    with pytest.raises(KftrainError, match=message):
        parse_reference(given)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["compile", str(REPO_ROOT / "pipelines/training/pytorch_digits/pipeline.yaml")],
            "already a compiled pipeline file",
            id="a-compiled-file",
        ),
        pytest.param(["compile", "pytorch-digits", "-o", "out.json"], "-o out.json: a compiled pipeline is a .yaml"),
        pytest.param(["compile", "pytorch-digits", "-o", "nowhere/out.yaml"], "no folder nowhere"),
        pytest.param(["compile", "pytorch-digits", "--check"], "--check and --root are for the committed files"),
        pytest.param(["compile", "-o", "x.yaml"], "-o x.yaml: name the pipeline to compile"),
    ],
)
def test_compile_refuses_what_it_cannot_write(
    folder: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert message in kftrain_fails(capsys, *argv)
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize(
    ("command", "forms"),
    [
        pytest.param(["run"], ["MODULE:FUNCTION", "compiled pipeline file", "pytorch-digits"], id="run"),
        pytest.param(["compile"], ["MODULE:FUNCTION", "-o FILE", "KFTRAIN_IMAGE_PULL_SECRETS"], id="compile"),
        pytest.param(["submit"], ["MODULE:FUNCTION", "compiled pipeline file", "pytorch-digits"], id="submit"),
        pytest.param(["schedule", "create"], ["MODULE:FUNCTION", "compiled pipeline file"], id="schedule-create"),
    ],
)
def test_the_help_of_every_command_names_what_it_accepts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: list[str], forms: list[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "2000")  # argparse wraps its help to the terminal's width
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for form in forms:
        assert form in text, text
