"""The settings of the host the user runs, in the host's own terms: its flags and what they derive.

The 2026 host (ComfyUI 0.33, read from its source: comfy/cli_args.py, comfy/model_management.py) decides
memory from a few command-line flags and the machine. The figures here are the host's own formulas:

- reserve: ``EXTRA_RESERVED_VRAM`` (comfy/model_management.py): 400 MiB, 600 MiB on Windows plus 100 MiB
  on cards over 15 GiB; ``--reserve-vram GB`` replaces it. ``--vram-headroom GB`` (DynamicVRAM) keeps that
  much more free, other programs counted through NVML.
- the pinned cap ``MAX_PINNED_MEMORY``: 40% of RAM on Windows, else
  ``max(0.4R, min(0.9R, R - 4 GiB, R + swap - 16 GiB))``; ``--disable-pinned-memory`` pins nothing.
- the RAM-pressure cache (the default since 0.23; main.py ``prompt_worker``): ``--cache-ram [ACTIVE
  [INACTIVE]]`` GB, ACTIVE 10% of RAM clamped to 2..10 GB; ``--cache-classic``, ``--cache-lru N`` and
  ``--cache-none`` replace it; ``--high-ram`` pins without a budget and implies ``--cache-classic``.
- pinning a layer needs ``max(ACTIVE / 2, 2 GiB)`` of RAM left available (``ensure_pin_budget``); with
  ``--fast-disk`` only the pinned cap bounds it and weights that have a VRAM page are read from the file.
- DynamicVRAM is on unless ``--disable-dynamic-vram``, ``--highvram``, ``--gpu-only``, ``--novram`` or
  ``--cpu`` (``cli_args.enables_dynamic_vram``); it needs an NVIDIA card (or ROCm >= 7.14).
- the Comfy Compiler (hosts 0.35 on, comfy-aimdo 0.5 on: ComfyUI#15861) records a sampling step's
  allocations and replays them; on unless ``--disable-comfy-compiler``, and only where DynamicVRAM runs
  (it is comfy-aimdo's). Not modelled by the plan: it is said with the settings.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..units import GB, GiB, MiB

CACHE_MODES = ("ram", "classic", "lru", "none")
# The behaviours --host picks: the 0.3.x reactive loader, or the 2026 paging host.
HOSTS = ("0.3", "2026")


@dataclass(frozen=True)
class HostSettings:
    """One host's memory settings. Sizes given to the host in GB are kept in GB (as its flags take them)."""

    host: str = "2026"  # "0.3": the reactive loader (baselines.comfyui_reactive); "2026": the paging host
    version: str = ""  # the running host's version, when the preflight read it
    dynamic_vram: bool = True
    fast_disk: bool = False
    cache: str = "ram"
    cache_ram: tuple[float, ...] = ()  # --cache-ram ACTIVE [INACTIVE], GB
    high_ram: bool = False
    reserve_vram: float | None = None  # GB; None: the host's default for the OS and card
    vram_headroom: float = 0.0  # GB
    pinned_memory: bool = True
    windows: bool = False
    swap: int = 0  # bytes of disk swap (zram excluded), for the Linux pinned cap
    read: tuple[str, ...] = field(default=(), compare=False)  # what was read from a running host, for notes
    # 0.37+ turns fast-disk on by itself on an NVMe drive (comfy/storage.py) unless --disable-fast-disk:
    # the plan cannot see the drive, assumes it off and says so
    fast_disk_auto: bool = False
    # why DynamicVRAM is off when --disable-dynamic-vram did not turn it off ("--cpu", "no NVIDIA card"):
    # the settings are then not given as that flag (M14: a --cpu server read "with --disable-dynamic-vram")
    dynamic_off_by: str = field(default="", compare=False)
    # the Comfy Compiler: True on, False off by --disable-comfy-compiler, None where the host has none (a
    # host without the flag, comfy-aimdo before 0.5, or no DynamicVRAM to run it)
    comfy_compiler: bool | None = None

    def __post_init__(self) -> None:
        if self.host not in HOSTS:
            raise ValueError(f"unknown host {self.host!r}; use one of {', '.join(HOSTS)}")
        if self.cache not in CACHE_MODES:
            raise ValueError(f"unknown cache mode {self.cache!r}; use one of {', '.join(CACHE_MODES)}")
        if self.high_ram and self.cache != "classic":
            object.__setattr__(self, "cache", "classic")  # cli_args: --high-ram implies --cache-classic
        if len(self.cache_ram) > 2 or any(not 0 <= v < 1e6 for v in self.cache_ram):
            raise ValueError("--cache-ram takes at most two sizes in GB: active and inactive")
        if self.vram_headroom < 0 or (self.reserve_vram is not None and self.reserve_vram < 0):
            raise ValueError("--reserve-vram and --vram-headroom are sizes in GB, not negative")

    @property
    def paging(self) -> bool:
        """The 2026 host with DynamicVRAM on: weights page per layer."""
        return self.host == "2026" and self.dynamic_vram

    # -- the host's own formulas

    def reserve(self, card_vram: int) -> int:
        if self.reserve_vram is not None:
            return int(self.reserve_vram * GiB)
        if self.windows:
            return 600 * MiB + (100 * MiB if card_vram > 15 * GiB else 0)
        return 400 * MiB

    def usable_vram(self, card_vram: int) -> int:
        """What the host lets weights and activations use: the card less its reserve and headroom."""
        headroom = int(self.vram_headroom * GiB) if self.paging else 0
        return max(0, card_vram - self.reserve(card_vram) - headroom)

    def pinned_cap(self, ram: int) -> int:
        if not self.pinned_memory:
            return 0
        if self.windows:
            return int(0.4 * ram)
        return int(max(0.4 * ram, min(0.9 * ram, ram - 4 * GiB, ram + self.swap - 16 * GiB)))

    def ram_headroom(self, ram: int) -> int:
        """The RAM the RAM-pressure cache keeps available after each node (0 with another cache)."""
        if self.cache != "ram":
            return 0
        active = self.cache_ram[0] if self.cache_ram else min(10.0, max(2.0, 0.10 * ram / GiB))
        return int(active * GiB)

    def pin_margin(self, ram: int) -> int:
        """RAM a new pin must leave available (``ensure_pin_budget``); 0 where no budget applies."""
        if self.high_ram or self.fast_disk:
            return 0
        return max(self.ram_headroom(ram) // 2, 2 * GiB)

    # -- flags

    def flags(self) -> list[str]:
        """The host's command-line flags that give these settings (the defaults left out)."""
        out: list[str] = []
        if self.host == "2026" and not self.dynamic_vram and not self.dynamic_off_by:
            out.append("--disable-dynamic-vram")
        if self.fast_disk:
            out.append("--fast-disk")
        if self.high_ram:
            out.append("--high-ram")
        elif self.cache == "classic":
            out.append("--cache-classic")
        elif self.cache == "none":
            out.append("--cache-none")
        elif self.cache == "lru":
            out.append("--cache-lru 100")
        elif self.cache_ram:
            out.append("--cache-ram " + " ".join(f"{v:g}" for v in self.cache_ram))
        if self.reserve_vram is not None:
            out.append(f"--reserve-vram {self.reserve_vram:g}")
        if self.vram_headroom:
            out.append(f"--vram-headroom {self.vram_headroom:g}")
        if not self.pinned_memory:
            out.append("--disable-pinned-memory")
        if self.comfy_compiler is False:
            out.append("--disable-comfy-compiler")
        return out

    def describe(self) -> str:
        name = "ComfyUI 0.3.x (reactive loader)" if self.host == "0.3" else "ComfyUI 2026"
        if self.version:
            name += f" {self.version}"
        if self.host == "2026":
            off = f" (DynamicVRAM off: {self.dynamic_off_by}" if self.dynamic_off_by else " (DynamicVRAM off"
            name += " (DynamicVRAM" if self.dynamic_vram else off
            name += f", {self.cache} cache" + (", fast-disk" if self.fast_disk else "")
            name += (
                ", fast-disk auto-detected: assumed off" if self.fast_disk_auto and not self.fast_disk else ""
            )
            name += (", Comfy Compiler" if self.comfy_compiler else "") + ")"
        flags = self.flags()
        return name + (f" with {' '.join(flags)}" if flags else "")

    def with_(self, **changes: Any) -> HostSettings:
        return replace(self, **changes)


def add_host_flags(parser: argparse.ArgumentParser) -> None:
    """The host's own memory flags, spelled as the host spells them, plus ``--host``."""
    group = parser.add_argument_group("the host (ComfyUI) the plan predicts and advises")
    group.add_argument(
        "--host", choices=HOSTS, default="2026",
        help="which ComfyUI to predict: 0.3 (the 2025 reactive loader) or 2026 (DynamicVRAM paging, the "
        "RAM-pressure cache; default). Both are printed; this one gets the settings advice",
    )  # fmt: skip
    disk = group.add_mutually_exclusive_group()
    disk.add_argument("--fast-disk", action="store_true", help="the host's --fast-disk")
    disk.add_argument(
        "--disable-fast-disk", action="store_true", help="the host's --disable-fast-disk (0.38)"
    )
    cache = group.add_mutually_exclusive_group()
    cache.add_argument(
        "--cache-ram", nargs="*", type=float, default=None, metavar="GB", help="the host's --cache-ram"
    )
    cache.add_argument("--cache-classic", action="store_true", help="the host's --cache-classic")
    cache.add_argument("--cache-none", action="store_true", help="the host's --cache-none")
    cache.add_argument(
        "--high-ram", action="store_true", help="the host's --high-ram (implies --cache-classic)"
    )
    group.add_argument(
        "--disable-dynamic-vram", action="store_true", help="the host's --disable-dynamic-vram"
    )
    group.add_argument(
        "--disable-pinned-memory", action="store_true", help="the host's --disable-pinned-memory"
    )
    group.add_argument(
        "--reserve-vram", type=float, default=None, metavar="GB", help="the host's --reserve-vram"
    )
    group.add_argument(
        "--vram-headroom", type=float, default=0.0, metavar="GB", help="the host's --vram-headroom"
    )
    group.add_argument(
        "--windows", action="store_true", help="the host runs on Windows (its reserve and pinned cap)"
    )


def settings_from_args(args: argparse.Namespace | Mapping[str, Any], host: str | None = None) -> HostSettings:
    """Settings from parsed flags: this CLI's (``add_host_flags``) or the host's own ``comfy.cli_args.args``
    (the names are the same); absent names take the host's defaults."""
    get = args.get if isinstance(args, Mapping) else lambda name, default=None: getattr(args, name, default)
    cache = "ram"
    if get("cache_classic", False) or get("high_ram", False):
        cache = "classic"
    elif get("cache_none", False):
        cache = "none"
    elif (get("cache_lru", 0) or 0) > 0:
        cache = "lru"
    off = [
        name for name in ("disable_dynamic_vram", "highvram", "gpu_only", "novram", "cpu") if get(name, False)
    ]
    dynamic = not off
    if get("enable_dynamic_vram", False):
        dynamic = True
    off_by = "" if dynamic or "disable_dynamic_vram" in off else "--" + off[0].replace("_", "-")
    no_compiler = get("disable_comfy_compiler", None)  # None: a host without the flag (before 0.35)
    return HostSettings(
        host=host or get("host", "2026") or "2026",
        dynamic_vram=dynamic,
        dynamic_off_by=off_by,
        fast_disk=bool(get("fast_disk", False)) and not get("disable_fast_disk", False),
        cache=cache,
        cache_ram=tuple(float(v) for v in (get("cache_ram", None) or ())),
        high_ram=bool(get("high_ram", False)),
        reserve_vram=get("reserve_vram", None),
        vram_headroom=float(get("vram_headroom", 0.0) or 0.0),
        pinned_memory=not get("disable_pinned_memory", False),
        windows=bool(get("windows", False)),
        comfy_compiler=None if no_compiler is None else not no_compiler,
    )


def parse_host_flags(text: str | Sequence[str], host: str = "2026") -> HostSettings:
    """Settings from the host's command line as the user types it (``"--cache-classic --reserve-vram 1"``);
    flags that are not about memory are ignored."""
    parser = argparse.ArgumentParser(add_help=False)
    add_host_flags(parser)
    for name in ("--highvram", "--gpu-only", "--novram", "--cpu", "--enable-dynamic-vram"):
        parser.add_argument(name, action="store_true")
    parser.add_argument("--cache-lru", type=int, default=0)
    argv = shlex.split(text) if isinstance(text, str) else list(text)
    args, _ = parser.parse_known_args(argv)
    return settings_from_args(args, host=host)


def card_from_budget(usable: int, reserve: int) -> int:
    """The card's total VRAM from a Headroom budget (usable + its reserve, ``Budget.from_card``)."""
    return usable + reserve


__all__ = [
    "CACHE_MODES",
    "GB",
    "HOSTS",
    "HostSettings",
    "add_host_flags",
    "card_from_budget",
    "parse_host_flags",
    "settings_from_args",
]
