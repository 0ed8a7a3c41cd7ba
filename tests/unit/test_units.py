from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from comfyui_headroom.memory.units import format_bytes, parse_bytes

GiB = 2**30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8GB", 8 * GiB),
        ("8 GiB", 8 * GiB),
        ("8g", 8 * GiB),
        ("7.5GB", int(7.5 * GiB)),
        ("512MB", 512 * 2**20),
        ("512M", 512 * 2**20),
        ("1tb", 2**40),
        ("16KiB", 16 * 2**10),
        ("100B", 100),
        ("8", 8 * GiB),
        (".5", GiB // 2),
        (6, 6 * GiB),
        (0.5, GiB // 2),
    ],
)
def test_parse_bytes(text: str | int | float, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "GB", "8 GB extra", "-1GB", "eight", "8XB", "8.5.1G", True])
def test_parse_bytes_rejects_garbage(text: object) -> None:
    with pytest.raises(ValueError):
        parse_bytes(text)  # type: ignore[arg-type]


def test_parse_bytes_bare_numbers_take_the_default_unit() -> None:
    assert parse_bytes("512", default_unit="m") == 512 * 2**20


@given(st.integers(min_value=0, max_value=2**50))
def test_format_then_parse_is_close(n: int) -> None:
    back = parse_bytes(format_bytes(n).replace(" ", ""))
    assert abs(back - n) <= max(1, n * 0.01)


def test_format_bytes() -> None:
    assert format_bytes(8 * GiB) == "8.00 GiB"
    assert format_bytes(1536 * 2**20) == "1.50 GiB"
    assert format_bytes(100) == "100 B"
