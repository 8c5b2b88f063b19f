"""kftrain.environ: variables set for a block, each restored or unset after it, also when the block fails."""

from __future__ import annotations

import os

import pytest

from kftrain.environ import environment


def test_each_variable_is_restored_or_unset_after_the_block_even_when_it_fails(monkeypatch):
    monkeypatch.setenv("KFTRAIN_TEST_SET", "before")
    monkeypatch.delenv("KFTRAIN_TEST_UNSET", raising=False)
    with pytest.raises(RuntimeError), environment({"KFTRAIN_TEST_SET": "in", "KFTRAIN_TEST_UNSET": "in"}):
        assert os.environ["KFTRAIN_TEST_SET"] == os.environ["KFTRAIN_TEST_UNSET"] == "in"
        raise RuntimeError("the block failed")
    assert os.environ["KFTRAIN_TEST_SET"] == "before" and "KFTRAIN_TEST_UNSET" not in os.environ
