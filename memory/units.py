"""Byte sizes as people write them ("8GB", "7.5 GiB", "512M") and as we print them."""

from __future__ import annotations

import math
import re

# Memory sizes on GPUs and in ComfyUI's own logs are binary: "8GB" on a card means 8 GiB.
_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_bytes(text: str | int | float, default_unit: str = "g") -> int:
    """Parse "8GB", "8 GiB", "7.5g", "512MB" or a bare number (in ``default_unit``) into bytes.

    Raises ValueError with the accepted forms for anything else, including negative sizes.
    """
    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, (int, float)):
        value, unit = float(text), default_unit
    else:
        match = _SIZE.match(text)
        if not match:
            raise ValueError(f"not a size: {text!r} (write it like 8GB, 7.5GiB, 512MB or 8)")
        value, unit = float(match.group(1)), (match.group(2) or default_unit)
        if not match.group(2) and re.search(r"b\s*$", text, re.IGNORECASE):
            unit = ""  # "512B" / "512 b": plain bytes
    if value < 0:
        raise ValueError(f"a size cannot be negative: {text!r}")
    return int(round(value * _UNITS[unit.lower()]))


def format_bytes(n: int | float) -> str:
    """Binary units, two decimals: 8589934592 -> '8.00 GiB'."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{value:.2f} TiB"


def parse_vram_budget(text: str | float | int | None) -> float | None:
    """GB as a float, or None for "auto". Raises ValueError with what is accepted."""
    if text is None:
        return None
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        cleaned = text.strip().lower().removesuffix("gb").strip()
        if cleaned in ("", "auto"):
            return None
        try:
            value = float(cleaned)
        except ValueError:
            raise ValueError(f'{text!r} is not "auto" or a number of GB (for example 6 or 4.5)') from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f'{text!r} is not "auto" or a positive number of GB (for example 6 or 4.5)')
    return value
