"""Reading a Dockerfile without a Docker engine: its instructions, the pip installs in its RUN lines and what they
pin (tests/containers/test_containers.py checks the images with these; tests/packaging/test_packaging.py the
extras they install); and the settings under which podman and buildah find the images built from them
(:func:`image_env`)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from testbed.reference import REPO


class Instruction(NamedTuple):
    """One instruction: the line it starts on, its keyword (upper case) and its arguments, continuations joined."""

    line: int
    keyword: str
    args: str


def parse_dockerfile(path: Path) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped."""
    out: list[Instruction] = []
    buffer: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        stripped = raw.strip()
        if not buffer and (not stripped or stripped.startswith("#")):
            continue
        if buffer and stripped.startswith("#"):  # a comment inside a continued instruction
            continue
        if not buffer:
            start = number
        if stripped.endswith("\\"):
            buffer.append(stripped[:-1].strip())
            continue
        buffer.append(stripped)
        text = " ".join(part for part in buffer if part)
        buffer = []
        keyword, _, args = text.partition(" ")
        out.append(Instruction(start, keyword.upper(), args.strip()))
    assert not buffer, f"{path}: the last instruction ends with a line continuation"
    return out


def normalize(name: str) -> str:
    """PEP 503 project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lines: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, _, version = line.partition("==")
            out[normalize(name.split("[")[0].strip())] = version.strip()
    return out


CONSTRAINTS = pins((REPO / "constraints.txt").read_text().splitlines())

# pip options that take a value (the value is not a requirement).
PIP_VALUE_OPTIONS = {
    "-c",
    "--constraint",
    "-r",
    "--requirement",
    "-e",
    "--editable",
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "-t",
    "--target",
    "--prefix",
    "--root",
    "--platform",
    "--python-version",
    "--implementation",
    "--abi",
    "--no-binary",
    "--only-binary",
    "--progress-bar",
    "--trusted-host",
    "--cache-dir",
    "--src",
    "--upgrade-strategy",
}


@dataclass(frozen=True)
class PipInstall:
    line: int
    options: list[str]  # the options with their values, as given
    requirements: list[str]


def shell_commands(script: str) -> list[list[str]]:
    """The words of each command of a shell line: split at ``&&``, ``||``, ``;`` and ``|`` outside quotes (a
    ``python -c "a; b"`` stays one command)."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars="&|;")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token and set(token) <= set("&|;"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def pip_installs(instructions: list[Instruction]) -> list[PipInstall]:
    found = []
    for ins in instructions:
        if ins.keyword != "RUN":
            continue
        for words in shell_commands(ins.args):
            if words[:1] == ["case"] and "in" in words:
                words = words[words.index("in") + 1 :]  # `case "$VARIANT" in cpu) pip install ...`
            # `VAR=value pip install ...`, and a `case` arm's label (`cpu) pip install ...`)
            while words and (
                re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0])
                or words[0] == "env"
                or re.fullmatch(r"[\w*|-]+\)", words[0])
            ):
                words = words[1:]
            if len(words) >= 2 and re.fullmatch(r"(.*/)?pip3?", words[0]) and words[1] == "install":
                rest = words[2:]
            elif (
                len(words) >= 4
                and re.fullmatch(r"(.*/)?python3?(\.\d+)?", words[0])
                and words[1:4]
                == [
                    "-m",
                    "pip",
                    "install",
                ]
            ):
                rest = words[4:]
            else:
                continue
            options, requirements = [], []
            it = iter(rest)
            for word in it:
                if word.startswith("-"):
                    options.append(word)
                    if word in PIP_VALUE_OPTIONS:
                        options.append(next(it, ""))
                else:
                    requirements.append(word)
            found.append(PipInstall(ins.line, options, requirements))
    return found


def is_local(requirement: str) -> bool:
    return (
        requirement in (".", "..") or requirement.startswith(("./", "/", "../", ".[")) or requirement.endswith(".whl")
    )


def package_extras(requirement: str) -> list[str] | None:
    """The extras of an install of this checkout (`.` or `.[a,b]`), else None."""
    match = re.fullmatch(r"\.(?:\[([\w,-]*)\])?", requirement)
    if match is None:
        return None
    return [e for e in (match[1] or "").split(",") if e]


def constraint_files(install: PipInstall) -> list[str]:
    out = []
    for i, option in enumerate(install.options):
        if option in ("-c", "--constraint") and i + 1 < len(install.options):
            out.append(install.options[i + 1])
        elif option.startswith("--constraint="):
            out.append(option.split("=", 1)[1])
    return out


def image_env() -> dict[str, str]:
    """This process's environment with the project's image storage and settings (``image_env`` in scripts/lib.sh:
    ``CONTAINERS_*`` and ``KFTRAIN_IMAGE_*``), for running podman or scripts/build_images.sh."""
    out = subprocess.run(
        ["bash", "-c", ". scripts/lib.sh && image_env && env -0"], cwd=REPO, capture_output=True, check=True
    ).stdout
    env = dict(os.environ)
    for item in out.decode().split("\0"):
        name, sep, value = item.partition("=")
        if sep and name.startswith(("CONTAINERS_", "KFTRAIN_IMAGE_")):
            env[name] = value
    return env
