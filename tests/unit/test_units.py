from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from comfyui_headroom.memory.units import (
    MIN_VRAM_BUDGET,
    format_bytes,
    parse_bytes,
    parse_size_setting,
    parse_vram_budget,
)
from comfyui_headroom.nodes.common import node_vram_budget as node_budget
from comfyui_headroom.nodes.common import validate_vram_budget

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


# -- the vram_budget node input: one parser for every node, the command line's sizes ----------------


@pytest.mark.parametrize("text", ["6", "6GB", "6 GiB", "6144MB", " 6gb ", 6, 6.0, "6g"])
def test_every_way_of_writing_six_gb_is_six_gb(text: object) -> None:
    assert parse_vram_budget(text) == 6 * GiB  # type: ignore[arg-type]
    assert node_budget(text, "Some Node") == 6 * GiB  # type: ignore[arg-type]
    assert parse_vram_budget(text) == parse_bytes(text)  # type: ignore[arg-type]  # as the CLI


@pytest.mark.parametrize("text", ["auto", "AUTO", " auto ", "", None])
def test_auto_is_no_budget(text: object) -> None:
    assert parse_vram_budget(text) is None  # type: ignore[arg-type]
    assert validate_vram_budget(text, "Some Node") is True


@pytest.mark.parametrize("text", ["1e-10", "1e-300", "0", "0.0", "0.0005", "512KB", 0, 1e-10])
def test_a_budget_that_rounds_to_nothing_is_refused_not_unlimited(text: object) -> None:
    with pytest.raises(ValueError, match="below the smallest budget"):
        parse_vram_budget(text)  # type: ignore[arg-type]
    assert parse_vram_budget("1MiB") == MIN_VRAM_BUDGET


@pytest.mark.parametrize(
    "text", ["six", "-1", "inf", "nan", "1e400", "1e308", "6 GB of VRAM", True, float("inf"), 1e308]
)
def test_every_node_words_a_bad_budget_the_same_way(text: object) -> None:
    with pytest.raises(ValueError) as plain:
        parse_vram_budget(text)  # type: ignore[arg-type]
    with pytest.raises(ValueError) as in_node:
        node_budget(text, "Some Node")  # type: ignore[arg-type]
    assert str(in_node.value) == f"Some Node: input vram_budget: {plain.value}."
    assert validate_vram_budget(text, "Some Node") == str(in_node.value)
    assert '"auto" or a size, for example 6, 6GB, 6 GiB or 6144MB' in str(plain.value)


@pytest.mark.parametrize(
    ("text", "says"),
    [("1e308", "not a size"), (1e308, "not a size"), ("1e300GB", "not a size"), ("0", "out of range"),
     ("0.1", "out of range"), ("65TiB", "out of range"), ("lots", "not a size"),
     (float("nan"), "not a size")],
)  # fmt: skip
def test_every_size_setting_has_one_parser_and_one_range(text: object, says: str) -> None:
    """HEADROOM_RAM_BUDGET, HEADROOM_ASSUME_VRAM and the RAM budget route: refused naming the setting
    (1e308 was an OverflowError: a 500 from the route, an import failure for the variable)."""
    with pytest.raises(ValueError, match=f"HEADROOM_X=.* {says}: write a size from 512.00 MiB to 64.00 TiB"):
        parse_size_setting(text, "HEADROOM_X")  # type: ignore[arg-type]
    assert parse_size_setting("24GB", "HEADROOM_X") == 24 * 2**30


def test_one_formatter_prints_binary_units_as_such_in_a_chosen_unit() -> None:
    assert format_bytes(8 * 2**30) == "8.00 GiB" and format_bytes(512 * 2**20) == "512.00 MiB"
    assert format_bytes(2**29, "GiB") == "0.50 GiB"
    assert format_bytes(1536 * 2**20, "MiB", 0, grouped=True) == "1,536 MiB"
    assert format_bytes(3 * 2**30 // 2, "GiB", 1) == "1.5 GiB"
    with pytest.raises(ValueError, match="unknown unit"):
        format_bytes(1, "GB")


def test_a_list_as_vram_budget_names_the_input() -> None:
    """Through the API a budget can be any JSON: a list was "expected string or bytes-like object"."""
    message = validate_vram_budget([6, "GB"], "Stream Model")
    assert isinstance(message, str)
    assert message.startswith("Stream Model: input vram_budget: [6, 'GB'] is not")
