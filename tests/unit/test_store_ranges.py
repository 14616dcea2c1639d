"""HTTP Range parsing of the local artifact handler (RFC 9110 single byte ranges)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.artifacts import ByteRange, parse_range
from api.errors import RangeNotSatisfiable


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        ("bytes=0-99", 1000, ByteRange(0, 99)),
        ("bytes=100-", 1000, ByteRange(100, 999)),
        ("bytes=-100", 1000, ByteRange(900, 999)),
        ("bytes=-5000", 1000, ByteRange(0, 999)),
        ("bytes=990-2000", 1000, ByteRange(990, 999)),
        ("BYTES = 5-5", 1000, ByteRange(5, 5)),
        (None, 1000, None),
        ("", 1000, None),
        ("items=0-1", 1000, None),  # another unit: ignore
        ("bytes=0-1,5-6", 1000, None),  # several ranges: serve the whole file
        ("bytes=9-3", 1000, None),  # invalid: ignore
        ("bytes=a-b", 1000, None),
        ("bytes=-", 1000, None),
        ("bytes", 1000, None),
    ],
)
def test_parse_range(header: str | None, size: int, expected: ByteRange | None) -> None:
    assert parse_range(header, size) == expected


@pytest.mark.parametrize(
    ("header", "size"),
    [("bytes=1000-", 1000), ("bytes=1000-1001", 1000), ("bytes=-0", 1000), ("bytes=-5", 0), ("bytes=0-", 0)],
)
def test_unsatisfiable(header: str, size: int) -> None:
    with pytest.raises(RangeNotSatisfiable):
        parse_range(header, size)


@given(st.integers(1, 10_000), st.integers(0, 20_000), st.integers(0, 20_000))
def test_ranges_stay_inside_the_file(size: int, a: int, b: int) -> None:
    first, last = min(a, b), max(a, b)
    try:
        r = parse_range(f"bytes={first}-{last}", size)
    except RangeNotSatisfiable:
        assert first >= size
        return
    assert r is not None
    assert 0 <= r.start <= r.end < size
    assert r.start == first and r.end == min(last, size - 1)
    assert r.length == r.end - r.start + 1
