"""Static checks of the container images (no Docker engine here): what each Dockerfile copies, installs and runs.

Every Dockerfile is built from the repository root (``docker build -f containers/<dir>/Dockerfile .``), so COPY
sources are repository paths. The images install this package against the lock file, pin everything else they
install, never use a ``:latest`` base, and there is one per image name of :mod:`kftrain.images`.
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from kftrain import images
from testbed import REPO_ROOT
from testbed.dockerfiles import (
    CONSTRAINTS,
    constraint_files,
    is_local,
    normalize,
    package_extras,
    parse_dockerfile,
    pip_installs,
)

ROOT = REPO_ROOT
CONTAINERS = ROOT / "containers"
DOCKERFILES = sorted(CONTAINERS.glob("*/Dockerfile"))
IDS = [p.parent.name for p in DOCKERFILES]


# --- the tests --------------------------------------------------------------------------------------


def test_there_are_dockerfiles() -> None:
    assert DOCKERFILES, f"no Dockerfile under {CONTAINERS}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=IDS)
def test_copy_sources_exist(dockerfile: Path) -> None:
    missing = []
    for ins in parse_dockerfile(dockerfile):
        if ins.keyword not in ("COPY", "ADD"):
            continue
        words = [w for w in shlex.split(ins.args) if not w.startswith("--")]
        if any(w.startswith("--from") for w in shlex.split(ins.args)):
            continue  # from another build stage
        if ins.args.lstrip().startswith("["):
            words = json.loads(ins.args)
        assert len(words) >= 2, f"{dockerfile}:{ins.line}: {ins.keyword} needs a source and a destination"
        for source in words[:-1]:
            if re.match(r"^[a-z]+://", source):
                continue  # ADD of a URL
            if any(ch in source for ch in "*?["):
                if not any(ROOT.glob(source)):
                    missing.append(f"{dockerfile}:{ins.line}: {source} matches nothing")
            elif not (ROOT / source).exists():
                missing.append(f"{dockerfile}:{ins.line}: {source} does not exist")
    assert not missing, "\n".join(missing)


def _entrypoint(dockerfile: Path) -> list[str]:
    found = [ins for ins in parse_dockerfile(dockerfile) if ins.keyword in ("ENTRYPOINT", "CMD")]
    assert found, f"{dockerfile}: no ENTRYPOINT or CMD"
    entry = [ins for ins in found if ins.keyword == "ENTRYPOINT"] or found
    last = entry[-1]
    assert last.args.startswith("["), f"{dockerfile}:{last.line}: use the exec (JSON) form, so signals reach Python"
    argv: list[str] = json.loads(last.args)
    return argv


def _module_exists(module: str) -> bool:
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=IDS)
def test_entrypoint_runs_something_the_package_has(dockerfile: Path) -> None:
    argv = _entrypoint(dockerfile)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("scripts", {})
    if argv[0] in ("python", "python3") and argv[1:2] == ["-m"]:
        module = argv[2]
        assert module.split(".")[0] == "kftrain", f"{dockerfile}: runs {module}, not a kftrain module"
        assert _module_exists(module), f"{dockerfile}: module {module} does not exist in the package"
    else:
        assert argv[0] in scripts, f"{dockerfile}: runs {argv[0]!r}, neither `python -m kftrain...` nor {list(scripts)}"
        module, _, attr = scripts[argv[0]].partition(":")
        assert _module_exists(module), f"console script {argv[0]}: module {module} does not exist"
        assert callable(getattr(importlib.import_module(module), attr, None)), f"{scripts[argv[0]]} is not callable"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=IDS)
def test_installs_the_package_against_the_lock_file(dockerfile: Path) -> None:
    instructions = parse_dockerfile(dockerfile)
    installs = pip_installs(instructions)
    package = [i for i in installs if any(package_extras(r) is not None for r in i.requirements)]
    assert package, f"{dockerfile}: never runs `pip install ... .` (the kftrain package)"
    for install in package:
        assert "constraints.txt" in constraint_files(install), (
            f"{dockerfile}:{install.line}: install the package with `-c constraints.txt` so its pins are the lock's"
        )
    copied = [w for ins in instructions if ins.keyword == "COPY" for w in shlex.split(ins.args)[:-1]]
    assert "constraints.txt" in copied, f"{dockerfile}: constraints.txt is never copied into the image"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=IDS)
def test_every_pip_install_is_pinned(dockerfile: Path) -> None:
    problems = []
    for install in pip_installs(parse_dockerfile(dockerfile)):
        for requirement in install.requirements:
            if is_local(requirement):
                continue
            name, sep, version = requirement.partition("==")
            if not sep or not version or any(ch in version for ch in "*<>=!~,"):
                problems.append(f"line {install.line}: {requirement!r} is not pinned with ==")
                continue
            locked = CONSTRAINTS.get(normalize(name.split("[")[0]))
            if locked is not None and locked != version:
                problems.append(f"line {install.line}: {requirement} but constraints.txt locks {locked}")
    assert not problems, f"{dockerfile}:\n" + "\n".join(problems)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=IDS)
def test_base_images_are_pinned(dockerfile: Path) -> None:
    stages: set[str] = set()
    froms = [ins for ins in parse_dockerfile(dockerfile) if ins.keyword == "FROM"]
    assert froms, f"{dockerfile}: no FROM"
    for ins in froms:
        words = [w for w in ins.args.split() if not w.startswith("--platform")]
        image = words[0]
        if len(words) >= 3 and words[1].upper() == "AS":
            stages.add(words[2])
        if image in stages or image == "scratch":
            continue
        if "@sha256:" in image:
            continue
        last = image.rsplit("/", 1)[-1]
        assert ":" in last, f"{dockerfile}:{ins.line}: base image {image} has no tag (that is :latest)"
        tag = last.split(":", 1)[1]
        assert tag != "latest" and "$" not in tag, f"{dockerfile}:{ins.line}: base image {image} is not pinned"


def test_every_image_name_has_a_dockerfile() -> None:
    folders = {folder for folder, _, _ in images.build_matrix()}
    missing = sorted(f for f in folders if not (CONTAINERS / f / "Dockerfile").is_file())
    assert not missing, f"images without a Dockerfile: {', '.join(f'containers/{d}/Dockerfile' for d in missing)}"
    # And no Dockerfile builds an image nothing refers to (`make images` builds the matrix of kftrain.images).
    extra = sorted(set(IDS) - folders)
    assert not extra, f"Dockerfiles for images kftrain.images does not name: {extra}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=IDS)
def test_a_framework_image_is_built_in_the_variant_named_and_no_other(dockerfile: Path) -> None:
    """CPU or CUDA is chosen with --build-arg VARIANT, never by a default; the build fails for a variant it lacks."""
    variants = {v for folder, v, _ in images.build_matrix() if folder == dockerfile.parent.name and v}
    instructions = parse_dockerfile(dockerfile)
    args = [ins.args for ins in instructions if ins.keyword == "ARG" and ins.args.split("=")[0] == "VARIANT"]
    if not variants:
        assert not args, f"{dockerfile}: one image, no variants: it takes no VARIANT"
        return
    assert args == ["VARIANT"], f"{dockerfile}: needs `ARG VARIANT` without a default, got {args}"
    runs = " ".join(ins.args for ins in instructions if ins.keyword == "RUN")
    handled = set(re.findall(r"(\w+)\) ", runs)) | set(re.findall(r'"\$VARIANT" = (\w+)', runs))
    assert handled == variants, f"{dockerfile}: builds {sorted(handled)}, kftrain.images names {sorted(variants)}"
    assert re.search(r"\*\) .*exit 1|\|\| \{ echo .*exit 1", runs), f"{dockerfile}: an unknown VARIANT must fail"
    torch_installs = [i for i in pip_installs(instructions) if any(r.startswith("torch==") for r in i.requirements)]
    if "cpu" in variants and torch_installs:
        assert any("https://download.pytorch.org/whl/cpu" in i.options for i in torch_installs), (
            f"{dockerfile}: the cpu variant must take torch from PyTorch's CPU index (PyPI's is the CUDA build)"
        )


def test_pyproject_ranges_admit_the_lock_file() -> None:
    """pyproject.toml declares ranges; constraints.txt locks one version of each, inside its range."""
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        declared += extra
    problems = []
    for text in declared:
        requirement = Requirement(text)
        name = normalize(requirement.name)
        if name == "kftrain":
            continue  # an extra made of other extras
        if not requirement.specifier:
            problems.append(f"{text}: give a range")
        locked = CONSTRAINTS.get(name)
        if locked is None:
            problems.append(f"{text}: constraints.txt locks no version")
        elif not requirement.specifier.contains(locked, prereleases=True):
            problems.append(f"{text}: constraints.txt locks {locked}, outside the range")
    assert not problems, "pyproject.toml and constraints.txt disagree:\n" + "\n".join(problems)


# --- the parser itself --------------------------------------------------------------------------------


def test_pip_install_parsing(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "FROM python:3.11-slim\n"
        "# a comment\n"
        "RUN pip install -c constraints.txt . \\\n"
        "    # inside\n"
        "    numpy==2.4.6 && X=1 python -m pip install --no-deps requests\n"
        "RUN echo pip install nothing; pip3 install -r requirements.txt 'torch>=2'\n"
        'RUN case "$V" in cpu) pip install --index-url https://x/cpu torch==2.13.0 ;; *) exit 1 ;; esac\n'
        "RUN pip install -c constraints.txt '.[data,s3]'\n"
    )
    installs = pip_installs(parse_dockerfile(dockerfile))
    assert [(i.options, i.requirements) for i in installs] == [
        (["-c", "constraints.txt"], [".", "numpy==2.4.6"]),
        (["--no-deps"], ["requests"]),
        (["-r", "requirements.txt"], ["torch>=2"]),
        (["--index-url", "https://x/cpu"], ["torch==2.13.0"]),
        (["-c", "constraints.txt"], [".[data,s3]"]),
    ]
    assert package_extras(".[data,s3]") == ["data", "s3"] and package_extras(".") == []
    assert package_extras("numpy==2") is None
