"""Cards by name: the published throughput, memory and bus of each, and the share of it diffusion reaches.

Throughputs are the vendors' dense tensor-core figures (no sparsity) with FP32 accumulation, which is
what torch's bf16/fp16 matmuls and SDPA use: on GeForce cards that is half the "FP16 accumulate" figure
of the spec sheets (RTX 4090: 165.2 TFLOPS, not 330). fp8 is the FP8-with-FP32-accumulate figure, None
where the card has no fp8 tensor cores (Ampere, RDNA3: fp8 weights compute at the bf16 rate there).
Sources: NVIDIA's Ampere GA102, Ada and Blackwell RTX architecture whitepapers and the A100/H100/H200/
L40S/L4 datasheets; AMD's RX 7900 XTX specification (dual-issue WMMA fp16/bf16). Bus: PCIe generation
and lanes of the card (the RTX 4060 Ti and 5060 Ti are x8), SXM parts counted as PCIe 5 x16 to the host.

What a run reaches is a share of the peak: ``EFFICIENCY`` holds the default shares, fitted to the
published run times of ``bench/results/wall_time.md`` (``bench/wall_time.py``); a card measured by the
GPU runbook (``scripts/gpu-check``: ``bench/gpu_throughput_gpu.py``) has its own shares in
``memory/data/gpu_efficiency.json``, which take precedence.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..units import GiB

MEASURED_PATH = Path(__file__).resolve().parents[1] / "data" / "gpu_efficiency.json"


@dataclass(frozen=True)
class Efficiency:
    """The share of peak throughput a diffusion model call reaches, per kind of work."""

    matmul: float  # linear layers and convolutions, at the precision the weights compute in
    attention: float  # scaled-dot-product attention (flash/memory-efficient kernels), bf16
    source: str = "default"


# Fitted by ``bench/wall_time.py --fit`` to the published run times (bench/results/wall_time.md): 20 runs on
# an RTX 4090 and 4090 D. Attention above 1: the attention kernels of those runs went faster than
# the bf16 FP32-accumulate figure of the GeForce spec sheets (flash/SDPA kernels, or 8-bit attention such
# as SageAttention where the host had it); scripts/gpu-check measures a card's own shares.
EFFICIENCY = Efficiency(matmul=0.58, attention=2.00, source="fitted to 20 published run times")


@dataclass(frozen=True)
class Gpu:
    name: str
    vram_gib: float
    bf16: float  # dense TFLOPS, FP32 accumulate (also fp16)
    fp8: float | None  # dense TFLOPS, FP32 accumulate; None: no fp8 tensor cores
    fp32: float  # dense non-tensor TFLOPS
    memory_gbs: float  # device memory bandwidth, GB/s
    pcie: int  # PCIe generation of the card's link
    lanes: int = 16
    aliases: tuple[str, ...] = ()
    efficiency: Efficiency = field(default=EFFICIENCY, compare=False)

    @property
    def vram(self) -> int:
        return int(self.vram_gib * GiB)

    def tflops(self, precision: str) -> float:
        """Peak dense TFLOPS at ``precision`` ("fp8", "bf16", "fp16", "fp32"); fp8 falls back to bf16."""
        if precision == "fp8":
            return self.fp8 or self.bf16
        return self.fp32 if precision == "fp32" else self.bf16


def _g(name: str, vram: float, bf16: float, fp8: float | None, fp32: float, mem: float, pcie: int,
       lanes: int = 16, *aliases: str) -> Gpu:  # fmt: skip
    return Gpu(name, vram, bf16, fp8, fp32, mem, pcie, lanes, aliases)


GPUS: tuple[Gpu, ...] = (
    # Ampere GeForce (GA102/GA104/GA106 whitepaper: FP16 tensor with FP32 accumulate)
    _g("RTX 3060", 12, 25.6, None, 12.7, 360, 4),
    _g("RTX 3060 Ti", 8, 32.4, None, 16.2, 448, 4),
    _g("RTX 3070", 8, 40.6, None, 20.3, 448, 4),
    _g("RTX 3080", 10, 59.5, None, 29.8, 760, 4),
    _g("RTX 3080 Ti", 12, 68.2, None, 34.1, 912, 4),
    _g("RTX 3090", 24, 71.0, None, 35.6, 936, 4),
    _g("RTX 3090 Ti", 24, 80.0, None, 40.0, 1008, 4),
    # Ada GeForce (Ada whitepaper: FP16/BF16 and FP8 tensor with FP32 accumulate)
    _g("RTX 4060", 8, 30.2, 60.5, 15.1, 272, 4, 8),
    _g("RTX 4060 Ti", 16, 44.2, 88.4, 22.1, 288, 4, 8),
    _g("RTX 4070", 12, 58.3, 116.6, 29.1, 504, 4),
    _g("RTX 4070 Super", 12, 71.0, 142.0, 35.5, 504, 4),
    _g("RTX 4070 Ti", 12, 80.2, 160.4, 40.1, 504, 4),
    _g("RTX 4070 Ti Super", 16, 88.2, 176.4, 44.1, 672, 4),
    _g("RTX 4080", 16, 97.5, 194.9, 48.7, 717, 4),
    _g("RTX 4080 Super", 16, 104.4, 208.9, 52.2, 736, 4),
    _g("RTX 4090", 24, 165.2, 330.3, 82.6, 1008, 4),
    _g("RTX 4090 D", 24, 147.0, 294.0, 73.5, 1008, 4, 16, "4090D"),
    # Blackwell GeForce (RTX Blackwell whitepaper: dense = half the sparse AI TOPS chain; FP32 accumulate)
    _g("RTX 5060 Ti", 16, 47.4, 94.9, 23.7, 448, 5, 8),
    _g("RTX 5070", 12, 61.7, 123.5, 30.9, 672, 5),
    _g("RTX 5070 Ti", 16, 87.9, 175.8, 43.9, 896, 5),
    _g("RTX 5080", 16, 112.6, 225.1, 56.3, 960, 5),
    _g("RTX 5090", 32, 209.5, 419.0, 104.8, 1792, 5),
    # workstation and data centre (datasheets; full-rate FP32 accumulate)
    _g("RTX A6000", 48, 154.8, None, 38.7, 768, 4),
    _g("RTX 6000 Ada", 48, 364.2, 728.5, 91.1, 960, 4, 16, "6000 Ada Generation"),
    _g("RTX PRO 6000 Blackwell", 96, 503.8, 1007.6, 125.0, 1792, 5, 16, "PRO 6000"),
    _g("L4", 24, 121.0, 242.0, 30.3, 300, 4),
    _g("L40", 48, 181.0, 362.0, 90.5, 864, 4),
    _g("L40S", 48, 362.1, 733.0, 91.6, 864, 4),
    _g("A100 40GB", 40, 312.0, None, 19.5, 1555, 4, 16, "A100-SXM4-40GB", "A100-PCIE-40GB"),
    _g("A100", 80, 312.0, None, 19.5, 2039, 4, 16, "A100 80GB", "A100-SXM4-80GB", "A100 80GB PCIe"),
    _g("H100 PCIe", 80, 756.0, 1513.0, 51.2, 2000, 5, 16, "H100 NVL"),
    _g("H100", 80, 989.0, 1979.0, 66.9, 3350, 5, 16, "H100 SXM", "H100 80GB HBM3"),
    _g("H200", 141, 989.0, 1979.0, 66.9, 4800, 5),
    _g("RX 7900 XTX", 24, 122.8, None, 61.4, 960, 4, 16, "Radeon RX 7900 XTX"),
    _g("RX 7900 XT", 20, 103.0, None, 51.5, 800, 4),
)
# What the plan assumes without --gpu and without a device: the most common 24 GB card of the bus the
# plan models (Hardware.pcie's generation), said in a note.
DEFAULT_FOR_PCIE = {3: "RTX 3090", 4: "RTX 4090", 5: "RTX 5090"}


def _key(text: str) -> str:
    """A card name reduced to what identifies it: lower case, no vendor words, no spaces or dashes."""
    text = text.lower()
    for word in ("nvidia", "geforce", "amd", "radeon", "tesla", "generation", "graphics", "laptop gpu"):
        text = text.replace(word, " ")
    return re.sub(r"[^a-z0-9]+", "", text)


@functools.cache
def _index() -> dict[str, Gpu]:
    out: dict[str, Gpu] = {}
    for gpu in GPUS:
        for name in (gpu.name, *gpu.aliases):
            out.setdefault(_key(name), gpu)
    return out


def find_gpu(name: str) -> Gpu | None:
    """The card named ``name`` (a --gpu argument, or the device name the host reports, such as "NVIDIA
    GeForce RTX 4090" or "NVIDIA H100 80GB HBM3"), with its measured efficiency when the runbook measured
    one; None when no card of the table matches. The longest table name contained in it wins, so
    "RTX 4090 D" is not read as "RTX 4090" nor "RTX 4060 Ti" as "RTX 4060"."""
    key = _key(name)
    if not key:
        return None
    index = _index()
    gpu = index.get(key)
    if gpu is None:
        matches = [k for k in index if k in key]
        if not matches:
            return None
        gpu = index[max(matches, key=len)]
    measured = measured_efficiency().get(gpu.name)
    return gpu if measured is None else Gpu(**{**gpu.__dict__, "efficiency": measured})


def gpu_names() -> list[str]:
    return [g.name for g in GPUS]


# What the card the defaults were fitted on reaches in a dense bf16 GEMM, as a share of its spec figure:
# the RTX 4090's 179.2 TFLOPS in cuBLASLt (github.com/xzwgit/gpu-flops-bench) over 165.2. Attention
# kernels are assumed to reach the same share there (no published figure).
REFERENCE_KERNEL_REACH = 179.2 / 165.2


def efficiency_from_kernels(
    card: Gpu, matmul_tflops: float, attention_tflops: float, source: str
) -> Efficiency:
    """The shares a card reaches in a model call, from its kernel throughput measured at diffusion shapes
    (bench/gpu_throughput_gpu.py): the default shares scaled by how much more (or less) of its peak this
    card's kernels reach than the reference card's."""
    return Efficiency(
        EFFICIENCY.matmul * matmul_tflops / card.bf16 / REFERENCE_KERNEL_REACH,
        EFFICIENCY.attention * attention_tflops / card.bf16 / REFERENCE_KERNEL_REACH,
        source,
    )


@functools.cache
def measured_efficiency(path: Path = MEASURED_PATH) -> dict[str, Efficiency]:
    """The shares the GPU runbook measured, by table name (``scripts/gpu_efficiency.py`` merges them)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for name, entry in data.get("cards", {}).items():
        try:
            out[name] = Efficiency(float(entry["matmul"]), float(entry["attention"]), str(entry["source"]))
        except (KeyError, TypeError, ValueError):
            continue
    return out
