"""The pieces of kftrain.storage.s3_transfer that need no server: the concurrency setting and part regrouping.

Transfers themselves are tested against a real S3 server in test_storage_s3.py.
"""

from __future__ import annotations

import pytest

from kftrain.storage import s3_transfer


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, s3_transfer.DEFAULT_CONCURRENCY), ("", s3_transfer.DEFAULT_CONCURRENCY), ("1", 1), (" 16 ", 16)],
)
def test_concurrency_setting(monkeypatch: pytest.MonkeyPatch, raw: str | None, expected: int) -> None:
    if raw is None:
        monkeypatch.delenv(s3_transfer.CONCURRENCY_ENV, raising=False)
    else:
        monkeypatch.setenv(s3_transfer.CONCURRENCY_ENV, raw)
    assert s3_transfer.concurrency() == expected


@pytest.mark.parametrize("raw", ["0", "-2", "four", "2.5"])
def test_bad_concurrency_setting_is_named(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(s3_transfer.CONCURRENCY_ENV, raw)
    with pytest.raises(ValueError, match=rf"KFTRAIN_S3_MAX_CONCURRENCY='{raw}': expected a whole number"):
        s3_transfer.concurrency()


@pytest.mark.parametrize(
    ("chunks", "part_size", "parts"),
    [
        ([], 4, []),
        ([b""], 4, []),
        ([b"ab"], 4, [b"ab"]),  # smaller than a part: one (last) part
        ([b"abcd"], 4, [b"abcd"]),  # a chunk that is a part is passed on as it is
        ([b"ab", b"cd", b"ef"], 4, [b"abcd", b"ef"]),
        ([b"abc", b"def", b"g"], 4, [b"abcdef", b"g"]),  # parts may overshoot, never undershoot (but the last)
        ([b"abcdefghij", b"k"], 4, [b"abcdefghij", b"k"]),
        ([b"a", b"", b"b", b"c", b"d"], 2, [b"ab", b"cd"]),
    ],
)
def test_chunks_regroup_into_parts(chunks: list[bytes], part_size: int, parts: list[bytes]) -> None:
    assert list(s3_transfer.regroup_into_parts(iter(chunks), part_size)) == parts


def test_part_size_doubles_every_grow_every_parts() -> None:
    parts = list(s3_transfer.regroup_into_parts(iter([b"x"] * 40), 1, grow_every=2))
    assert [len(p) for p in parts] == [1, 1, 2, 2, 4, 4, 8, 8, 10]  # the last part takes what is left


def test_default_growth_fits_half_a_terabyte_in_s3s_part_limit() -> None:
    base = 8 * 1024 * 1024
    sizes = [base << (n // s3_transfer.GROW_EVERY) for n in range(s3_transfer.MAX_PARTS)]
    assert sum(sizes) > 480 * 1024**3
    assert max(sizes) <= 5 * 1024**3  # S3's largest part
