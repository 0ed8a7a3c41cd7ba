"""The cost model the planner optimises and every baseline is priced in.

Everything is in one currency, seconds of transfer: bytes moved over a link divided by that link's
bandwidth. Compute time only enters the predicted wall time (where transfers overlap it), never the
objective, so the optimum is "move the fewest bytes over the slowest links".

Bandwidth defaults per PCIe generation are typical measured pinned host-to-device rates of an x16 link
(PCIe3 ~12.5 GB/s, PCIe4 ~25 GB/s, PCIe5 ~55 GB/s: about 80% of the link's 16/32/64 GB/s). Pageable copies
are staged by the driver; no reliable figure is published, so we assume half the pinned rate. Disk is a
cold NVMe read through the page cache. Inside ComfyUI, the rates a run measured on this machine replace
these figures in its next plans (``telemetry.links``; ``Hardware.measured`` names them, and
``Hardware.links_line`` says which are measured and which assumed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any

import numpy as np

from ..units import GB, GiB
from .gpus import DEFAULT_FOR_PCIE, Efficiency, Gpu, find_gpu


@dataclass(frozen=True)
class Hardware:
    """Link bandwidths (bytes/s) and GPU throughput, overridable field by field."""

    name: str
    h2d_pinned: float
    h2d_pageable: float
    d2h: float
    disk: float
    memcpy: float
    tflops: float  # dense bf16 throughput actually reached by diffusion kernels, for wall-time estimates
    # the card whose throughput and memory bandwidth price compute (a name of gpus.GPUS); ``gpu_assumed``:
    # nobody said which card, the plan assumed this one (and says so in a note)
    gpu: str = DEFAULT_FOR_PCIE[4]
    gpu_assumed: bool = True
    # how the card was chosen: "named" (--gpu, the sidebar), "device" (the host's device), "assumed"
    gpu_source: str = "assumed"
    fp8_matmul: bool = False  # the host multiplies fp8 weights in fp8 (else it casts them to bf16)
    efficiency: Efficiency | None = None  # the card's shares of its peak; None: the table's
    # the link figures a run on this machine measured (telemetry.links); the others are assumed
    measured: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # every figure divides a byte count: zero divides by zero, NaN or a negative rate poisons the plan
        for name in ("h2d_pinned", "h2d_pageable", "d2h", "disk", "memcpy", "tflops"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"Hardware.{name} must be a finite positive number, not {value!r}")

    @classmethod
    def pcie(cls, generation: int) -> Hardware:
        try:
            pinned, pageable, tflops = _PCIE[generation]
        except KeyError:
            raise ValueError(f"unknown PCIe generation {generation}; use 3, 4 or 5") from None
        return cls(
            name=f"PCIe {generation}.0 x16",
            h2d_pinned=pinned * GB,
            h2d_pageable=pageable * GB,
            d2h=pageable * GB,
            disk=3.0 * GB,
            memcpy=10.0 * GB,
            tflops=tflops,
            gpu=DEFAULT_FOR_PCIE[generation],
        )

    @classmethod
    def for_gpu(cls, gpu: Gpu | str) -> Hardware:
        """The bus of ``gpu`` (a card of gpus.GPUS, or its name as --gpu or the host gives it): its PCIe
        generation, halved for an x8 card; its throughput prices compute."""
        card = find_gpu(gpu) if isinstance(gpu, str) else gpu
        if card is None:
            raise ValueError(f"unknown GPU {gpu!r}: name a card of the table (see --gpu help)")
        base = cls.pcie(min(max(card.pcie, 3), 5))
        lanes = card.lanes / 16
        return replace(
            base,
            name=f"{card.name}, PCIe {card.pcie}.0 x{card.lanes}",
            h2d_pinned=base.h2d_pinned * lanes,
            h2d_pageable=base.h2d_pageable * lanes,
            d2h=base.d2h * lanes,
            tflops=card.bf16 * card.shares.matmul,
            gpu=card.name,
            gpu_assumed=False,
            gpu_source="named",
            efficiency=card.shares,
        )

    @classmethod
    def for_device(cls, name: str | None) -> Hardware:
        """The card the host reports by name ("NVIDIA GeForce RTX 4090"), else PCIe 4's defaults (the
        plan's note then says which card it assumed)."""
        card = find_gpu(name) if name else None
        return replace(cls.for_gpu(card), gpu_source="device") if card is not None else cls.pcie(4)

    def card(self) -> Gpu:
        """The card that prices compute (the PCIe generation's default when none was named)."""
        found = find_gpu(self.gpu)
        if found is None:
            raise ValueError(f"unknown GPU {self.gpu!r}")
        return found if self.efficiency is None else replace(found, efficiency=self.efficiency)

    def links_line(self) -> str:
        """The link figures, each said measured or assumed: "upload 23.1 GB/s pinned (measured), ..."."""
        parts = [("h2d_pinned", "upload pinned"), ("h2d_pageable", "upload pageable"), ("disk", "disk read")]
        return ", ".join(
            f"{label} {getattr(self, f) / 1e9:.1f} GB/s ({'measured' if f in self.measured else 'assumed'})"
            for f, label in parts
        )

    def with_overrides(
        self,
        *,
        h2d_pinned: float | None = None,
        h2d_pageable: float | None = None,
        d2h: float | None = None,
        disk: float | None = None,
        memcpy: float | None = None,
        tflops: float | None = None,
    ) -> Hardware:
        """These figures with the rates given replaced (None keeps one), checked as any Hardware's."""
        return replace(
            self,
            h2d_pinned=self.h2d_pinned if h2d_pinned is None else h2d_pinned,
            h2d_pageable=self.h2d_pageable if h2d_pageable is None else h2d_pageable,
            d2h=self.d2h if d2h is None else d2h,
            disk=self.disk if disk is None else disk,
            memcpy=self.memcpy if memcpy is None else memcpy,
            tflops=self.tflops if tflops is None else tflops,
        )


# generation -> (pinned GB/s, pageable GB/s, reached TFLOPS of a typical card on that bus)
_PCIE = {3: (12.5, 6.0, 35.0), 4: (25.0, 12.0, 80.0), 5: (55.0, 20.0, 150.0)}


@dataclass(frozen=True)
class Budget:
    """What the plan may use. ``vram`` is the usable VRAM (card total minus ``reserve``)."""

    vram: int
    ram: int
    pinned: int  # pinned-RAM cap (pinning more than ~half the RAM starves the OS, Windows caps it)
    # d: blocks uploaded ahead while one computes (the ring holds d+1 blocks); None lets the planner choose
    prefetch_depth: int | None = None
    reserve: int = 0  # VRAM the card keeps for the driver, CUDA context and other programs (not usable)
    asked_reserve: int = 0  # the reserve asked for; more than ``reserve`` on a card smaller than it

    @classmethod
    def from_card(
        cls, card_vram: int, ram: int, reserve: int = GiB // 2, pinned_fraction: float = 0.5
    ) -> Budget:
        """A card's total VRAM minus what the driver, CUDA context and host keep (``reserve``)."""
        if card_vram <= 0 or ram <= 0:
            raise ValueError("VRAM and RAM must be positive")
        # the card cannot keep more than it has: so card = vram + reserve, which the advice relies on
        asked = max(0, reserve)
        reserve = min(asked, card_vram)
        pinned = int(ram * pinned_fraction)
        return cls(vram=card_vram - reserve, ram=ram, pinned=pinned, reserve=reserve, asked_reserve=asked)

    def card_for(self, usable: int) -> int:
        """The least card on which ``usable`` bytes are usable under the reserve asked for, solved
        directly: a card smaller than the reserve keeps all it has, so ``vram + reserve`` of this budget
        would advise a card that is again too small (9.38 -> 10.76 -> 10.88 GiB where 17.38 fits)."""
        return max(0, usable) + max(self.reserve, self.asked_reserve)


class Tier(IntEnum):
    """Where a component is during a step: a GPU part and a host part.

    GPU part: G = every weight resident; S = some blocks resident, the rest streamed (only while the
    component computes); none. Host part: P = pinned RAM copy, R = pageable RAM copy, D = no copy
    in RAM (the safetensors file, memory-mapped).
    """

    GPU_PINNED = 0
    GPU_RAM = 1
    GPU_ONLY = 2
    STREAM_PINNED = 3
    STREAM_RAM = 4
    STREAM_DISK = 5
    PINNED = 6
    RAM = 7
    DISK = 8

    @property
    def gpu(self) -> str:
        return "G" if self <= 2 else "S" if self <= 5 else ""

    @property
    def host(self) -> str:
        return "PRDPRDPRD"[self]

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    Tier.GPU_PINNED: "gpu+pinned",
    Tier.GPU_RAM: "gpu+ram",
    Tier.GPU_ONLY: "gpu",
    Tier.STREAM_PINNED: "stream<-pinned",
    Tier.STREAM_RAM: "stream<-ram",
    Tier.STREAM_DISK: "stream<-disk",
    Tier.PINNED: "pinned",
    Tier.RAM: "ram",
    Tier.DISK: "disk",
}
# A user's residency choice for a component, as the Offload Loader offers it (its inputs' choices, with
# "auto"): the GPU part or host part every tier of that component must have. "" (auto) leaves the planner
# free. CHOICE_HOST: the host tier letter a choice fixes.
RESIDENCY_CHOICES = ("auto", "gpu", "pinned_ram", "ram", "disk")
PIN_CHOICES = ("", *RESIDENCY_CHOICES[1:])
CHOICE_HOST = {"pinned_ram": "P", "ram": "R", "disk": "D"}
_PIN_RULE = {
    "gpu": lambda t: t.gpu == "G",
    "pinned_ram": lambda t: t.host == "P",
    "ram": lambda t: t.host == "R",
    "disk": lambda t: t.host == "D",
}


def pinned_tiers(pin: str, tiers: tuple[Tier, ...]) -> tuple[Tier, ...]:
    """``tiers`` that honour a residency choice ("" keeps them all)."""
    return tiers if not pin else tuple(t for t in tiers if _PIN_RULE[pin](t))


USED_TIERS = tuple(t for t in Tier if t.gpu)  # a component that computes must be on the GPU
IDLE_TIERS = tuple(t for t in Tier if t.gpu != "S")  # streaming happens only while computing


def upload_bandwidth(hw: Hardware, host: str) -> float:
    """Host -> GPU rate from a host part: pinned, pageable, or straight from the file."""
    return {"P": hw.h2d_pinned, "R": hw.h2d_pageable, "D": hw.disk}[host]


def transition_parts(hw: Hardware, nbytes: int, a: Tier, b: Tier) -> tuple[float, float]:
    """Transfer cost of one component going from tier ``a`` to tier ``b`` between two steps, as
    (seconds making a new RAM copy, seconds uploading a new full GPU copy).

    Dropping a copy is free (weights are never written back: the file or another copy has them).
    A new RAM copy comes from the other RAM copy (memcpy), the GPU copy (device-to-host) or the file.
    A new full GPU copy comes from the fastest copy available before or after the move. Entering a
    streamed state uploads nothing here: its resident blocks are priced with the step (they depend
    on the VRAM left at that step).
    """
    copy = upload = 0.0
    if b.host in "PR" and a.host != b.host:
        copy = nbytes / copy_source(hw, a)[1]
    if b.gpu == "G" and a.gpu != "G":
        upload = nbytes / upload_bandwidth(hw, upload_source(hw, a, b))
    return copy, upload


def copy_source(hw: Hardware, a: Tier) -> tuple[str, float]:
    """Where a new RAM copy comes from, leaving tier ``a``: the fastest of the file ("D"), the other
    RAM copy ("P"/"R", a memcpy) and the GPU copy ("G", device-to-host); with its rate."""
    sources = [("D", hw.disk)]
    if a.host in "PR":
        sources.append((a.host, hw.memcpy))
    if a.gpu == "G":
        sources.append(("G", hw.d2h))
    return max(sources, key=lambda source: source[1])


def upload_source(hw: Hardware, a: Tier, b: Tier) -> str:
    """The host part a full GPU upload reads from going from ``a`` to ``b``: the faster of the two."""
    return a.host if upload_bandwidth(hw, a.host) >= upload_bandwidth(hw, b.host) else b.host


def transition_seconds(hw: Hardware, nbytes: int, a: Tier, b: Tier) -> float:
    """The whole transfer cost of a move (see ``transition_parts``)."""
    copy, upload = transition_parts(hw, nbytes, a, b)
    return copy + upload


def stream_seconds(hw: Hardware, host: str, once: Any, streamed: Any, pinned: Any, evaluations: int) -> Any:
    """Transfer cost of a streamed component during one step (scalars or numpy arrays).

    ``once`` bytes (what stays on the GPU: the non-block weights and the resident blocks) are uploaded
    at the step's start, ``streamed`` bytes at every evaluation. From pinned RAM only ``pinned`` of the
    streamed bytes fit under the pinned cap: they go at the pinned rate, the rest at the pageable rate,
    and the bytes uploaded once come in the same proportion (a stream that pins nothing costs exactly
    a stream from pageable RAM).
    """
    if host != "P":
        return (once + evaluations * streamed) / upload_bandwidth(hw, host)
    fast, slow = hw.h2d_pinned, hw.h2d_pageable
    share = np.where(np.asarray(streamed) > 0, pinned / np.maximum(streamed, 1), 1.0)
    per_pass = pinned / fast + (streamed - pinned) / slow
    return once * (share / fast + (1 - share) / slow) + evaluations * per_pass
