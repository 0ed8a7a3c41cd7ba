"""Byte sizes as people write them ("8GB", "7.5 GiB", "512M") and as we print them."""

from __future__ import annotations

import math
import re

# The one home of the byte units. Memory sizes on GPUs and in ComfyUI's own logs are binary: "8GB" on a
# card means 8 GiB. Bandwidths are quoted in decimal GB/s, as vendors and benchmarks do.
KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40
GB = 1e9

_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE = re.compile(r"^\s*((?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


class SizeOverflow(ValueError):
    """A size too large to count in bytes ("1e308GB")."""


def parse_bytes(text: str | int | float, default_unit: str = "g") -> int:
    """Parse "8GB", "8 GiB", "7.5g", "512MB" or a bare number (in ``default_unit``) into bytes.

    Raises ValueError with the accepted forms for anything else, including negative sizes.
    """
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):  # a list from an API prompt
        raise ValueError(f"not a size: {text!r} (write it like 6, 6GB, 6 GiB or 6144MB)")
    if isinstance(text, (int, float)):
        value, unit = float(text), default_unit
    else:
        match = _SIZE.match(text)
        if not match:
            raise ValueError(f"not a size: {text!r} (write it like 6, 6GB, 6 GiB or 6144MB)")
        value, unit = float(match.group(1)), (match.group(2) or default_unit)
        if not match.group(2) and re.search(r"b\s*$", text, re.IGNORECASE):
            unit = ""  # "512B" / "512 b": plain bytes
    if value < 0 or not math.isfinite(value):
        raise ValueError(f"a size cannot be negative or infinite: {text!r}")
    nbytes = value * _UNITS[unit.lower()]
    if not math.isfinite(nbytes):  # "1e308GB": finite, but not once in bytes
        raise SizeOverflow(f"not a size: {text!r} is too large")
    return int(round(nbytes))


# The range every size setting takes (HEADROOM_RAM_BUDGET, HEADROOM_ASSUME_VRAM, the RAM budget setting):
# below 512 MiB nothing runs (ComfyUI itself takes more), above 64 TiB no machine has it.
SETTING_MIN, SETTING_MAX = 512 * MiB, 64 * TiB


def parse_size_setting(text: str | int | float, name: str) -> int:
    """A size setting in bytes (a bare number is GiB), within [SETTING_MIN, SETTING_MAX]; anything else
    raises ValueError naming the setting, the value and what to write."""
    fix = f"write a size from {format_bytes(SETTING_MIN)} to {format_bytes(SETTING_MAX)}, for example 24GB"
    try:
        nbytes = parse_bytes(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a size: {fix}") from None
    if not SETTING_MIN <= nbytes <= SETTING_MAX:
        raise ValueError(f"{name}={text!r} is out of range: {fix}")
    return nbytes


def format_bytes(n: int | float, unit: str | None = None, decimals: int = 2, grouped: bool = False) -> str:
    """The pack's one byte formatter, in binary units: 8589934592 -> '8.00 GiB'. ``unit`` ("B", "KiB",
    "MiB", "GiB", "TiB") fixes the unit, so figures in one table or message compare at a glance
    ('0.50 GiB'); ``decimals`` rounds; ``grouped`` writes thousands with commas ('1,536 MiB')."""
    if unit is not None:
        scale = _BINARY.get(unit)
        if scale is None:
            raise ValueError(f"unknown unit {unit!r}; use one of {', '.join(_BINARY)}")
        return f"{n / scale:{',' if grouped else ''}.{decimals}f} {unit}"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.{decimals}f} {unit}"
        value /= 1024
    return f"{value:.{decimals}f} TiB"


_BINARY = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def format_bytes_up(n: int | float, unit: str = "GiB", decimals: int = 2) -> str:
    """``format_bytes`` rounded up, for a size that must be enough: 'a card with 11.35 GiB' where 11.3462
    GiB is needed (rounded to nearest, 11.35 could print as 11.34 for 11.3438, which does not fit)."""
    step = 10**decimals
    return format_bytes(math.ceil(n * step / _BINARY[unit]) / step * _BINARY[unit], unit, decimals)


# The node input ``vram_budget``: one parser for every node (and the same sizes as the command line).
VRAM_BUDGET_FORMS = '"auto" or a size, for example 6, 6GB, 6 GiB or 6144MB'
MIN_VRAM_BUDGET = 2**20  # below 1 MiB no model fits: refused, never read as "no budget"


def parse_vram_budget(text: str | float | int | None) -> int | None:
    """The ``vram_budget`` input in bytes, or None for "auto" (and empty). A bare number is GB.

    Raises ValueError saying what is accepted, also for sizes below ``MIN_VRAM_BUDGET`` (a budget
    that rounds to nothing must not read as "no budget").
    """
    if text is None or (isinstance(text, str) and text.strip().lower() in ("", "auto")):
        return None
    if isinstance(text, float) and not math.isfinite(text):
        raise ValueError(f"{text!r} is not {VRAM_BUDGET_FORMS}")
    try:
        nbytes = parse_bytes(text)
    except ValueError:  # "1e308" GB is finite, but not once in bytes: SizeOverflow
        raise ValueError(f"{text!r} is not {VRAM_BUDGET_FORMS}") from None
    if nbytes < MIN_VRAM_BUDGET:
        smallest = format_bytes(MIN_VRAM_BUDGET)
        raise ValueError(f"{text!r} is below the smallest budget, {smallest}: write {VRAM_BUDGET_FORMS}")
    return nbytes


NOTE_CHARS = 400  # a note or message line longer than this is cut: a 1 MB value makes no readable note


def cut_text(text: str, limit: int = NOTE_CHARS) -> str:
    """``text`` itself, or its first ``limit`` characters and how many more were cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"
