"""Kubernetes' ``$(VAR)`` expansion, as a replica here gets it: the rule of
kubernetes/kubernetes@v1.36.3:third_party/forked/golang/expansion/expand.go (its own table, expand_test.go), applied
with the names the kubelet maps (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables for env values: the variables
declared before; pkg/kubelet/container/helpers.go ExpandContainerCommandAndArgs for command and args: the container's
whole declared env), never with this process's environment."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from kftrain.backends.local import expand_k8s_vars
from kftrain.backends.local.replica import ExpansionTooLarge, prepare_replica
from kftrain.job import load_manifest
from kftrain.job.topology import ReplicaId, Topology
from testbed.local_harness import options
from testbed.manifests import pytorchjob, replica

# expand_test.go's doExpansionTest, with its context.
CONTEXT = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}
EXPAND = {
    "whole string": ("$(VAR_A)", "A"),
    "repeat": ("$(VAR_A)-$(VAR_A)", "A-A"),
    "escape & expand": ("$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
    "mixed in escapes": ("f000-$$VAR_A", "f000-$VAR_A"),
    "backslash escape ignored": ("foo\\$(VAR_C)bar", "foo\\Cbar"),
    "nested var references": ("$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"),
    "nested var references second type": ("$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"),
    "value is a reference (one pass)": ("$(VAR_REF)", "$(VAR_A)"),
    "empty var": ("foo$(VAR_EMPTY)bar", "foobar"),
    "unterminated expression": ("foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"),
    "shell special vars pass through": ("$?_boo_$!", "$?_boo_$!"),
    "bare operators are ignored": ("$VAR_A", "$VAR_A"),
    "undefined vars are passed through": ("$(VAR_DNE)", "$(VAR_DNE)"),
    "multiple (odd) operators, var defined": ("$$$$$$$(VAR_A)", "$$$A"),
    "multiple (even) operators, var undefined": ("$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),
    "shell syntax ignored": ("${VAR_A}", "${VAR_A}"),
    "trailing incomplete expression, no content": ("$(VAR_C)_______$(", "C_______$("),
    "operator at end of input string is preserved": ("$(VAR_A)foobarzab$", "Afoobarzab$"),
    "lots of $( in middle": ("--$($($($($--", "--$($($($($--"),
    "escaped operators in variable names are not escaped": ("$(foo$$var)", "$(foo$$var)"),
    "a name is everything up to the ')'": ("$(mktemp -d)", "$(mktemp -d)"),
}


@pytest.mark.parametrize("case", EXPAND)
def test_expansion_follows_kubernetes_own_table(case: str) -> None:
    text, expected = EXPAND[case]
    assert expand_k8s_vars(text, CONTEXT) == expected


def test_an_expansion_past_the_limit_stops_but_a_long_literal_does_not() -> None:
    with pytest.raises(ExpansionTooLarge):
        expand_k8s_vars("$(VAR_A)" * 20, {"VAR_A": "x" * 10}, limit=100)
    assert expand_k8s_vars("$x" * 100, {}, limit=100) == "$x" * 100  # nothing expanded: for check_exec_size to name


def _prepared(tmp_path: Path, env: list[dict[str, Any]], args: list[str], **config: Any) -> tuple[list[str], dict]:
    """The argv (after the program) and env of a PyTorchJob's Master whose container has ``env`` and ``args``."""
    manifest = pytorchjob({"Master": replica(1, "pytorch", [sys.executable, "-c", "pass"], env=env, args=args)})
    job = load_manifest(manifest)
    master = ReplicaId("Master", 0)
    topology = Topology(ports={master: 29500}, files_root=tmp_path)
    prepared = prepare_replica(job, master, topology, options(tmp_path, **config), tmp_path)
    return prepared.argv[3:], prepared.env


A = {"name": "A", "value": "/data"}
B = {"name": "B", "value": "$(A)/sub"}

# (env of the container, its args, what the args become, what of the env is then seen): what this process's whole
# environment used to give, and a name the former pattern of names missed.
FIXED: dict[str, tuple[list[dict[str, Any]], list[str], list[str], dict[str, str]]] = {
    "this process's variables are not the container's: args": ([], ["$(HOME)/x"], ["$(HOME)/x"], {}),
    "this process's variables are not the container's: env": (
        [{"name": "H", "value": "$(HOME)"}],
        [],
        [],
        {"H": "$(HOME)"},
    ),
    "a URI in the args stays as written": ([], ["s3://b/$(HOME)/ds"], ["s3://b/$(HOME)/ds"], {}),
    "extra variables of the config are not declared": ([], ["$(EXTRA_SETTING)"], ["$(EXTRA_SETTING)"], {}),
    "a name no shell takes": ([{"name": "-my.var", "value": "v"}], ["$(-my.var)"], ["v"], {}),
}
# The same rule's other half, which held before and must still hold: what the pod declares is expanded.
KEPT: dict[str, tuple[list[dict[str, Any]], list[str], list[str], dict[str, str]]] = {
    "a value names a variable declared before it": ([A, B], ["$(B)"], ["/data/sub"], {"B": "/data/sub"}),
    "a value naming one declared after it stays as written": ([B, A], ["$(B)"], ["$(A)/sub"], {"B": "$(A)/sub"}),
    "args name every declared variable": ([B, A], ["$(A)"], ["/data"], {}),
    "args name the operator's variables": ([], ["--rank=$(RANK)"], ["--rank=0"], {}),
    "a value cannot name the operator's (appended after the container's)": (
        [{"name": "R", "value": "$(RANK)"}],
        [],
        [],
        {"R": "$(RANK)"},
    ),
    "an escaped reference": ([A], ["$$(A)"], ["$(A)"], {}),
    "a valueFrom is not expanded": (
        [A, {"name": "KFTRAIN_TEST_TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        ["$(KFTRAIN_TEST_TOKEN)"],
        ["$(A)"],
        {"KFTRAIN_TEST_TOKEN": "$(A)"},
    ),
}
CASES = {**FIXED, **KEPT}


@pytest.mark.parametrize("case", CASES)
def test_a_replica_expands_only_what_its_pod_declares(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, args, expected_args, expected_env = CASES[case]
    monkeypatch.setenv("HOME", "/home/someone")
    monkeypatch.setenv("KFTRAIN_TEST_TOKEN", "$(A)")  # what secretKeyRef resolves to here
    argv, seen = _prepared(tmp_path, env, args, extra_env={"EXTRA_SETTING": "on"})
    assert argv == expected_args
    assert {k: seen.get(k) for k in expected_env} == expected_env
