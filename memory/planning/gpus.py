"""Cards by name: each one's published peaks, memory and bus, and the share of each peak diffusion reaches.

Peaks are the vendors' dense tensor-core figures (no sparsity), kept per precision and accumulate mode,
because the two kinds of spec sheet quote different things:

- **consumer** cards (GeForce, Radeon): the table's ``bf16`` is the FP16/BF16 figure *with FP32
  accumulate*, which is what torch's bf16/fp16 matmuls and SDPA use, and on GeForce that runs at half the
  "FP16 accumulate" figure the marketing pages quote (RTX 4090: 165.2 TFLOPS, not 330.3). Boost clocks
  in the field often run above the spec sheet's, so a kernel can reach about the whole figure.
- **full_rate** cards (workstation and data centre before Hopper: RTX A6000/6000 Ada/PRO 6000, L4/L20/
  L40/L40S, A10, A100/A800, V100, T4): FP32 accumulate runs at the full rate, so ``bf16`` is the
  datasheet's dense figure, held only within the card's power limit.
- **hopper** cards (H100, H200, H800, H20): a full-rate figure that only Hopper's own instructions reach
  (wgmma and the tensor memory accelerator: cuBLAS, FlashAttention-3). The attention kernels PyTorch's
  SDPA runs there are FlashAttention-2's, written for Ampere: the FlashAttention-3 paper measures them at
  about 35-40% of the H100's peak, so a share fitted on other cards does not carry to these.

``fp8`` is the FP8 figure with FP32 accumulate, None where the card has no fp8 tensor cores (Ampere,
RDNA3: fp8 weights compute at the bf16 rate there). Sources: NVIDIA's Ampere GA102, Ada and Blackwell
RTX architecture whitepapers (laptop parts: NVIDIA's "AI TOPS" per part, which are sparse FP8 on Ada and
sparse FP4 on Blackwell, so dense bf16 = TOPS / 8 and / 16), the A100/H100/H200/L40S/L4 datasheets; AMD's
RX 7900 XTX specification (dual-issue WMMA). Bus: PCIe generation and lanes of the card (the RTX 4060
Ti, 5060 Ti and laptop parts below the xx80 are x8), SXM parts counted as PCIe 5 x16 to the host.

A name is matched exactly (``find_gpu``): the vendor's words and a memory size ("80GB", "HBM3") are
ignored, nothing else is, so "RTX A1000" is not an A100 nor "RTX 4090 Laptop" the desktop card. What a
run reaches is a share of each peak (``Efficiency``, each at most 1): the defaults per kind of spec
sheet were fitted to published run times (``bench/wall_time.py``, held-out error in
``bench/results/wall_time.md``); a card the GPU runbook measured (``scripts/gpu-check``:
``bench/gpu_throughput_gpu.py``) has its own kernel shares in ``memory/data/gpu_efficiency.json``, which
take precedence.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..units import GiB

MEASURED_PATH = Path(__file__).resolve().parents[1] / "data" / "gpu_efficiency.json"
MAX_OVERHEAD_S = 0.25  # per model call: kernel launches and the host's Python, never more than this
# Process node of each architecture, for the power a sustained TFLOPS costs (``POWER``); RDNA3 (5 nm) is
# counted with the 4 nm parts, no published run of one was at hand to fit it apart.
PROCESS = {"volta": "12nm", "turing": "12nm", "ampere": "8nm", "ada": "4nm", "hopper": "4nm",
           "blackwell": "4nm", "rdna3": "4nm"}  # fmt: skip


@dataclass(frozen=True)
class Efficiency:
    """The share of a card's published peak each kind of kernel reaches in a diffusion model call, and
    the fixed cost of a call. Every share is in (0, 1]: no kernel runs faster than its card's peak."""

    matmul: float  # linear layers: dense GEMMs at the precision the weights compute in
    attention: float  # scaled-dot-product attention at long sequences and head dim 128, bf16
    conv: float  # convolutions (VAE encoders and decoders), bf16
    memory: float  # memory-bound ops (norms, activations, residual adds): a share of memory bandwidth
    overhead_s: float  # seconds per model call that no FLOP counts (launches, the sampler's Python)
    source: str = "default"

    def __post_init__(self) -> None:
        for name in ("matmul", "attention", "conv", "memory"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"Efficiency.{name} must be in (0, 1] of the card's peak, not {value!r}")
        if not 0 <= self.overhead_s <= MAX_OVERHEAD_S:
            raise ValueError(
                f"Efficiency.overhead_s must be in [0, {MAX_OVERHEAD_S}] s, not {self.overhead_s!r}"
            )


@dataclass(frozen=True)
class TimeModel:
    """The fitted figures of the time model, each a physical quantity within its bound.

    ``kernels``: the share of the peak each kernel class reaches at a sustained clock. ``watts_per_tflops``:
    the board power one sustained dense bf16 TFLOPS costs on a process node: a card whose power limit is
    below ``watts_per_tflops x peak`` sustains only ``power limit / (watts_per_tflops x peak)`` of its
    peak (an H100 SXM at 700 W for 989 TFLOPS, a T4 at 70 W for 65, an RTX 6000 Ada at 300 W for 364;
    a GeForce card's half-rate figure costs less power than its limit, so it keeps its whole peak).
    ``hopper_sdpa``: the share of a Hopper card's throughput PyTorch's SDPA attention reaches there: its
    FlashAttention-2 kernels use Ampere's instructions, which the FlashAttention-3 paper measures at about
    35-40% of the H100's peak against 75% for Hopper's own (wgmma)."""

    kernels: Efficiency
    watts_per_tflops: dict[str, float]
    hopper_sdpa: float
    source: str = "default"

    def __post_init__(self) -> None:
        if not 0 < self.hopper_sdpa <= 1:
            raise ValueError(f"TimeModel.hopper_sdpa must be in (0, 1], not {self.hopper_sdpa!r}")
        if any(not 0 < w < 100 for w in self.watts_per_tflops.values()):
            raise ValueError(f"TimeModel.watts_per_tflops out of range: {self.watts_per_tflops!r}")


# Fitted by ``bench/wall_time.py --fit`` (bounded least squares on log(predicted / measured)) to the
# published run times of bench/results/wall_time.md, where each figure's valley and the held-out error
# are. The GEMM, attention and convolution shares sit at their bound: what a kernel reaches beyond the
# spec sheet (boost clocks above it) is not counted. No case constrains the 12 nm parts' watts (no
# V100 or T4 run states every setting): 1.5x Ampere's, the perf-per-watt step from Turing to Ampere.
MODEL = TimeModel(
    Efficiency(1.0, 1.0, 1.0, 0.401, 0.021, "fitted to published run times"),
    {"12nm": 3.79, "8nm": 2.527, "4nm": 1.319},
    0.593,
    "fitted to published run times (bench/results/wall_time.md)",
)


def sustained(watts: float, peak: float, process: str, model: TimeModel = MODEL) -> float:
    """The share of ``peak`` TFLOPS a card of ``watts`` board power sustains on ``process``, at most 1."""
    per = model.watts_per_tflops.get(process, max(model.watts_per_tflops.values()))
    return min(1.0, watts / (per * peak)) if watts > 0 else 1.0


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
    arch: str = "ada"  # PROCESS's keys
    watts: float = 0.0  # board power limit (TDP / TGP), W; 0: not limited
    spec: str = "consumer"  # the kind of spec sheet: consumer (GeForce, Radeon) or full_rate
    efficiency: Efficiency | None = field(default=None, compare=False)  # None: from MODEL

    def __post_init__(self) -> None:
        if self.efficiency is None:
            object.__setattr__(self, "efficiency", card_efficiency(self))

    @property
    def vram(self) -> int:
        return int(self.vram_gib * GiB)

    @property
    def shares(self) -> Efficiency:
        assert self.efficiency is not None  # set in __post_init__
        return self.efficiency

    def tflops(self, precision: str, accumulate: str = "fp32") -> float:
        """Peak dense TFLOPS at ``precision`` ("fp8", "bf16", "fp16", "fp32") and accumulate mode; fp8
        falls back to bf16 on cards without fp8 tensor cores. FP16 accumulate doubles a consumer card's
        tensor figure (full-rate cards run FP32 accumulate at that rate already)."""
        if precision == "fp32":
            return self.fp32
        peak = (self.fp8 or self.bf16) if precision == "fp8" else self.bf16
        return peak * 2 if accumulate == "fp16" and self.spec == "consumer" else peak


def card_efficiency(card: Gpu, model: TimeModel = MODEL) -> Efficiency:
    """A card's shares under ``model``: the kernels' shares at the share of its peak its power sustains,
    attention lowered on Hopper (``TimeModel.hopper_sdpa``)."""
    reach = sustained(card.watts, card.bf16, PROCESS.get(card.arch, "4nm"), model)
    k = model.kernels
    hopper = model.hopper_sdpa if card.arch == "hopper" else 1.0
    return replace(
        k, matmul=k.matmul * reach, attention=k.attention * reach * hopper, conv=k.conv * reach,
        source=model.source,
    )  # fmt: skip


def _g(name: str, vram: float, bf16: float, fp8: float | None, fp32: float, mem: float, pcie: int,
       watts: float, arch: str, lanes: int = 16, *aliases: str) -> Gpu:  # fmt: skip
    return Gpu(name, vram, bf16, fp8, fp32, mem, pcie, lanes, aliases, arch, watts, "consumer")


def _pro(name: str, vram: float, bf16: float, fp8: float | None, fp32: float, mem: float, pcie: int,
         watts: float, arch: str, *aliases: str) -> Gpu:  # fmt: skip
    return Gpu(name, vram, bf16, fp8, fp32, mem, pcie, 16, aliases, arch, watts, "full_rate")


GPUS: tuple[Gpu, ...] = (
    # Ampere GeForce (GA102/GA104/GA106 whitepaper: FP16 tensor with FP32 accumulate)
    _g("RTX 3060", 12, 25.6, None, 12.7, 360, 4, 170, "ampere"),
    _g("RTX 3060 Ti", 8, 32.4, None, 16.2, 448, 4, 200, "ampere"),
    _g("RTX 3070", 8, 40.6, None, 20.3, 448, 4, 220, "ampere"),
    _g("RTX 3080", 10, 59.5, None, 29.8, 760, 4, 320, "ampere"),
    _g("RTX 3080 Ti", 12, 68.2, None, 34.1, 912, 4, 350, "ampere"),
    _g("RTX 3090", 24, 71.0, None, 35.6, 936, 4, 350, "ampere"),
    _g("RTX 3090 Ti", 24, 80.0, None, 40.0, 1008, 4, 450, "ampere"),
    # Ada GeForce (Ada whitepaper: FP16/BF16 and FP8 tensor with FP32 accumulate)
    _g("RTX 4060", 8, 30.2, 60.5, 15.1, 272, 4, 115, "ada", 8),
    _g("RTX 4060 Ti", 16, 44.2, 88.4, 22.1, 288, 4, 165, "ada", 8),
    _g("RTX 4070", 12, 58.3, 116.6, 29.1, 504, 4, 200, "ada"),
    _g("RTX 4070 Super", 12, 71.0, 142.0, 35.5, 504, 4, 220, "ada"),
    _g("RTX 4070 Ti", 12, 80.2, 160.4, 40.1, 504, 4, 285, "ada"),
    _g("RTX 4070 Ti Super", 16, 88.2, 176.4, 44.1, 672, 4, 285, "ada"),
    _g("RTX 4080", 16, 97.5, 194.9, 48.7, 717, 4, 320, "ada"),
    _g("RTX 4080 Super", 16, 104.4, 208.9, 52.2, 736, 4, 320, "ada"),
    _g("RTX 4090", 24, 165.2, 330.3, 82.6, 1008, 4, 450, "ada"),
    _g("RTX 4090 D", 24, 147.0, 294.0, 73.5, 1008, 4, 425, "ada", 16, "4090D"),
    # Ada laptop parts (NVIDIA's AI TOPS per part: sparse FP8, so dense bf16 = TOPS / 8; the figure and
    # the power are the part's top ones, a laptop may set both lower)
    _g("RTX 4060 Laptop", 8, 29.1, 58.3, 15.1, 256, 4, 115, "ada", 8),
    _g("RTX 4070 Laptop", 8, 40.1, 80.3, 15.6, 256, 4, 115, "ada", 8),
    _g("RTX 4080 Laptop", 12, 67.8, 135.5, 33.9, 432, 4, 150, "ada"),
    _g("RTX 4090 Laptop", 16, 85.8, 171.5, 42.9, 576, 4, 150, "ada"),
    # Blackwell GeForce (RTX Blackwell whitepaper: dense = half the sparse AI TOPS chain; FP32 accumulate)
    _g("RTX 5060 Ti", 16, 47.4, 94.9, 23.7, 448, 5, 180, "blackwell", 8),
    _g("RTX 5070", 12, 61.7, 123.5, 30.9, 672, 5, 250, "blackwell"),
    _g("RTX 5070 Ti", 16, 87.9, 175.8, 43.9, 896, 5, 300, "blackwell"),
    _g("RTX 5080", 16, 112.6, 225.1, 56.3, 960, 5, 360, "blackwell"),
    _g("RTX 5090", 32, 209.5, 419.0, 104.8, 1792, 5, 575, "blackwell"),
    # Blackwell laptop parts (AI TOPS per part: sparse FP4, so dense bf16 = TOPS / 16)
    _g("RTX 5070 Laptop", 8, 49.9, 99.8, 25.0, 384, 5, 115, "blackwell", 8),
    _g("RTX 5070 Ti Laptop", 12, 62.0, 124.0, 31.0, 672, 5, 140, "blackwell", 8),
    _g("RTX 5080 Laptop", 16, 83.4, 166.8, 41.7, 896, 5, 175, "blackwell"),
    _g("RTX 5090 Laptop", 24, 114.0, 228.0, 57.0, 896, 5, 175, "blackwell"),
    # workstation and data centre (datasheets; full-rate FP32 accumulate)
    _pro("RTX A6000", 48, 154.8, None, 38.7, 768, 4, 300, "ampere"),
    _pro("RTX 6000 Ada", 48, 364.2, 728.5, 91.1, 960, 4, 300, "ada", "6000 Ada Generation"),
    _pro(
        "RTX PRO 6000 Blackwell",
        96,
        503.8,
        1007.6,
        125.0,
        1792,
        5,
        600,
        "blackwell",
        "PRO 6000",
        "RTX PRO 6000 Blackwell Workstation Edition",
        "RTX PRO 6000 Blackwell Server Edition",
    ),
    _pro("L4", 24, 121.0, 242.0, 30.3, 300, 4, 72, "ada"),
    # Volta and Turing data centre: fp16 tensor cores only (the host computes in fp16 there)
    _pro(
        "V100", 32, 125.0, None, 15.7, 900, 3, 300, "volta", "V100 SXM2", "V100-SXM2-32GB", "V100-SXM2-16GB"
    ),
    _pro("V100 PCIe", 32, 112.0, None, 14.0, 900, 3, 250, "volta", "V100-PCIE-32GB", "V100-PCIE-16GB"),
    _pro("T4", 16, 65.0, None, 8.1, 320, 3, 70, "turing"),
    _pro("A10", 24, 125.0, None, 31.2, 600, 4, 150, "ampere"),
    _pro("L40", 48, 181.0, 362.0, 90.5, 864, 4, 300, "ada"),
    _pro("L40S", 48, 362.1, 733.0, 91.6, 864, 4, 350, "ada"),
    _pro("L20", 48, 119.5, 239.0, 59.8, 864, 4, 275, "ada"),
    _pro(
        "A100 40GB",
        40,
        312.0,
        None,
        19.5,
        1555,
        4,
        400,
        "ampere",
        "A100-SXM4-40GB",
        "A100-PCIE-40GB",
        "A100 PCIe 40GB",
    ),
    _pro(
        "A100",
        80,
        312.0,
        None,
        19.5,
        2039,
        4,
        400,
        "ampere",
        "A100 80GB",
        "A100-SXM4-80GB",
        "A100 80GB PCIe",
        "A100 SXM",
    ),
    _pro("H100 PCIe", 80, 756.0, 1513.0, 51.2, 2000, 5, 350, "hopper", "H100 NVL"),
    _pro("H100", 80, 989.0, 1979.0, 66.9, 3350, 5, 700, "hopper", "H100 SXM", "H100 80GB HBM3", "H100 SXM5"),
    _pro("H200", 141, 989.0, 1979.0, 66.9, 4800, 5, 700, "hopper", "H200 SXM"),
    # the export parts: the H800 and A800 compute as the H100 SXM and A100 80 GB; the H20 is cut down
    _pro("H800", 80, 989.0, 1979.0, 66.9, 3350, 5, 700, "hopper", "H800 SXM", "H800 80GB HBM3"),
    _pro(
        "A800", 80, 312.0, None, 19.5, 2039, 4, 400, "ampere", "A800 80GB", "A800-SXM4-80GB", "A800 80GB PCIe"
    ),
    _pro("H20", 96, 148.0, 296.0, 44.0, 4000, 5, 400, "hopper"),
    _g("RX 7900 XTX", 24, 122.8, None, 61.4, 960, 4, 355, "rdna3", 16, "Radeon RX 7900 XTX"),
    _g("RX 7900 XT", 20, 103.0, None, 51.5, 800, 4, 315, "rdna3"),
)
# What the plan assumes without --gpu and without a device: the most common 24 GB card of the bus the
# plan models (Hardware.pcie's generation), said in a note.
DEFAULT_FOR_PCIE = {3: "RTX 3090", 4: "RTX 4090", 5: "RTX 5090"}

# Words a card's name carries that do not tell cards apart (vendors, product lines, "GPU"), and the memory
# size or type some hosts append ("NVIDIA H100 80GB HBM3"): a size is read only where the table has two
# cards of one name that it tells apart (the A100's 40 and 80 GB).
_VENDOR = re.compile(r"\b(nvidia|geforce|amd|radeon|tesla|graphics|gpu|generation|fe|founders|edition)\b")
_MEMORY = re.compile(r"\d+\s*gb?\b|hbm\d*e?")


def _key(text: str, memory: bool = True) -> str:
    """A card name reduced to what identifies it: lower case, letters and digits in runs, less the vendor
    words and the "RTX" prefix ("NVIDIA GeForce RTX 4060 Ti" -> "4060ti", "RTX4090 D" -> "4090d");
    ``memory=False`` drops its memory size and type as well."""
    text = _VENDOR.sub(" ", re.sub(r"[^a-z0-9]+", " ", text.lower()))
    if not memory:
        text = _MEMORY.sub(" ", text)
    return "".join(w for w in re.findall(r"[a-z]+|\d+", text) if w != "rtx")


@functools.cache
def _index() -> tuple[dict[str, Gpu], dict[str, Gpu | None]]:
    """(full names, names without their memory size): a short name two cards share maps to None."""
    full: dict[str, Gpu] = {}
    short: dict[str, Gpu | None] = {}
    for gpu in GPUS:
        for name in (gpu.name, *gpu.aliases):
            full.setdefault(_key(name), gpu)
            key = _key(name, memory=False)
            short[key] = gpu if short.get(key, gpu) == gpu else None
    return full, short


def find_gpu(name: str) -> Gpu | None:
    """The card named ``name`` (a --gpu argument, or the device name the host reports, such as "NVIDIA
    GeForce RTX 4090" or "NVIDIA H100 80GB HBM3"), with its measured efficiency when the runbook measured
    one; None when no card of the table has exactly that name (``nearest_gpus`` says which come close):
    never another card whose name it contains."""
    full, short = _index()
    key = _key(name)
    gpu = full.get(key) if key else None
    if gpu is None and key:
        gpu = short.get(_key(name, memory=False))
    if gpu is None:
        return None
    measured = measured_efficiency().get(gpu.name)
    return gpu if measured is None else replace(gpu, efficiency=measured)


def nearest_gpus(name: str, n: int = 3) -> list[str]:
    """The table's names closest to ``name``, for an error that says what was meant."""
    keys = {_key(g.name): g.name for g in GPUS}
    close = difflib.get_close_matches(_key(name), list(keys), n=n, cutoff=0.5)
    return [keys[k] for k in close]


def gpu_names() -> list[str]:
    return [g.name for g in GPUS]


def efficiency_from_kernels(
    card: Gpu, matmul_tflops: float, attention_tflops: float, source: str
) -> Efficiency:
    """A card's shares from its kernel throughput measured at diffusion shapes (bench/gpu_throughput_gpu.py):
    the measured TFLOPS over the card's bf16 peak, at most 1 (a boost clock above the spec sheet's can
    outrun it); what was not measured (convolution, memory, the per-call overhead) stays the model's."""
    return replace(
        card_efficiency(card),
        matmul=min(1.0, matmul_tflops / card.bf16),
        attention=min(1.0, attention_tflops / card.bf16),
        source=source,
    )


@functools.cache
def measured_efficiency(path: Path = MEASURED_PATH) -> dict[str, Efficiency]:
    """The shares the GPU runbook measured, by table name (``scripts/gpu_efficiency.py`` merges them)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    by_name = {g.name: g for g in GPUS}
    for name, entry in data.get("cards", {}).items():
        card = by_name.get(name)
        if card is None:
            continue
        try:
            out[name] = efficiency_from_kernels(
                card,
                float(entry["matmul"]) * card.bf16,
                float(entry["attention"]) * card.bf16,
                str(entry["source"]),
            )
        except (KeyError, TypeError, ValueError):
            continue
    return out
