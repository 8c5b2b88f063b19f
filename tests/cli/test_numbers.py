"""Every numeric option is parsed by one family of argparse types: a finite number within the option's range,
refused where it is typed, naming the option."""

from __future__ import annotations

import pytest

from kftrain.cli.app import build_parser

PIPELINE = ["pytorch-digits", "--host", "http://127.0.0.1:9"]
# (the command line, what argparse's error says)
REFUSED = {
    "poll-negative": (
        ["submit", *PIPELINE, "--poll-seconds", "-1"],
        "argument --poll-seconds: '-1': expected a finite",
    ),
    "poll-zero": (["submit", *PIPELINE, "--poll-seconds", "0"], "argument --poll-seconds: '0': expected"),
    "poll-nan": (["submit", *PIPELINE, "--poll-seconds", "nan"], "argument --poll-seconds: 'nan': expected a finite"),
    "poll-inf": (["submit", *PIPELINE, "--poll-seconds", "inf"], "argument --poll-seconds: 'inf': expected a finite"),
    "poll-huge": (["submit", *PIPELINE, "--poll-seconds", "1e20"], "argument --poll-seconds: '1e20': expected"),
    "poll-text": (["submit", *PIPELINE, "--poll-seconds", "soon"], "argument --poll-seconds: 'soon' is not a number"),
    "timeout-negative": (["submit", *PIPELINE, "--timeout", "-5"], "argument --timeout: '-5': expected a finite"),
    "timeout-nan": (["submit", *PIPELINE, "--timeout", "NaN"], "argument --timeout: 'NaN': expected a finite"),
    "interval-huge": (
        ["schedule", "create", *PIPELINE, "--interval-seconds", "1e20"],
        "argument --interval-seconds: '1e20' is not a whole number of seconds",
    ),
    "interval-past-int64": (
        ["schedule", "create", *PIPELINE, "--interval-seconds", str(2**63)],
        "argument --interval-seconds: '9223372036854775808': expected a whole number of seconds from 1 to",
    ),
    "interval-zero": (
        ["schedule", "create", *PIPELINE, "--interval-seconds", "0"],
        "argument --interval-seconds: '0': expected a whole number of seconds from 1",
    ),
    "interval-fraction": (
        ["schedule", "create", *PIPELINE, "--interval-seconds", "1.5"],
        "argument --interval-seconds: '1.5' is not a whole number",
    ),
    "tail-negative": (["jobs", "logs", "j", "--tail", "-1"], "argument --tail: '-1': expected a whole number of lines"),
    "tail-zero": (
        ["jobs", "logs", "j", "--tail", "0"],
        "argument --tail: '0': expected a whole number of lines from 1",
    ),
    "launch-timeout-inf": (["launch", "-f", "x.yaml", "--timeout", "inf"], "argument --timeout: 'inf': expected"),
    "replicas-zero": (
        ["launch", "-f", "x.yaml", "--max-local-replicas", "0"],
        "argument --max-local-replicas: '0': expected a whole number of replicas from 1",
    ),
}
ACCEPTED = {
    "poll": (["submit", *PIPELINE, "--poll-seconds", "0.5"], "poll_seconds", 0.5),
    "timeout": (["submit", *PIPELINE, "--timeout", "3600"], "timeout", 3600.0),
    "interval": (["schedule", "create", *PIPELINE, "--interval-seconds", "60"], "interval_seconds", 60),
    "tail": (["jobs", "logs", "j", "--tail", "1"], "tail", 1),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_number_out_of_range_is_refused_naming_the_option(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv, message = REFUSED[case]
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_a_number_in_range_is_parsed(case: str) -> None:
    argv, attribute, value = ACCEPTED[case]
    assert getattr(build_parser().parse_args(argv), attribute) == value
