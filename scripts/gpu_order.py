"""The order ``scripts/gpu-check`` runs its steps in, by value, and what each is expected to take (#41).

A device session has 15 minutes in all, a machine's start (1-2 minutes) included, and one command at
most 10: the steps that matter most go first, so that a call cut off at its limit has measured those.
``ORDER`` ranks the steps (a step file, and the host mode where it matters); each rank carries the
seconds the step is expected to take on an H100/H200, measured where the 2026-11-26 H200 session ran it
to its end (the longest of its rows in ``bench/results/gpu-check.md``'s "seconds" column, process start
included; tests/unit/test_gpu_order.py reads them there) and estimated otherwise. Steps found by glob
but not ranked follow the ranked ones in the order found; with several hosts (``--hosts``) the first
host's steps come first. ``calls`` packs the ordered steps into device
calls by their expected seconds; ``--dry-run`` prints them and each call's total.

``REHEARSE`` gives each benchmark the arguments that run it on a CPU (``--rehearse``): its CPU smoke or
dry run, as far as its first CUDA call; a step without one runs as it is (it says "no CUDA" and exits 0,
and a GPU test skips inside pytest after its imports and collection).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

CALL_BUDGET = 570  # one device call's command runs 600 s at most; 30 s for setup and the copy back
DEFAULT_TEST_EXPECTED, DEFAULT_BENCH_EXPECTED = 60, 120  # an unranked step, estimated
DVRAM_ON, DVRAM_OFF = "(DynamicVRAM on)", "(--disable-dynamic-vram)"  # gpu_hosts.HostRun labels


@dataclass(frozen=True)
class Rank:
    """One place in the order: a step file, the host mode it runs under ("on", "off" or "*": any, also
    a run without ``--hosts``), the seconds expected, whether measured on the H200, and why it is here."""

    file: str
    mode: str
    seconds: int
    measured: bool
    why: str


_FIXED = "1. fixed after 2026-11-26"
_AIMDO = "1b. comfy-aimdo 0.6's page-out callback counted (#40)"
_RESIDENCY = "2. two-expert residency: per-node peaks vs plan"
_REPEAT = "3. Headroom vs DynamicVRAM's paging, repeat run (>= 1.2x)"
_STREAM = "4. streamed step vs max(compute, bytes / pinned H2D) (<= 1.05)"
_KERNELS = "5. matmul and attention throughput per dtype (the time model)"
_PEAK = "6. peak VRAM <= budget under the Offload Loader"
_DECODE = "7. bf16 tiled decode exact across the video families"
_COMPILE = "7b. Stream Model under torch.compile on CUDA: pixels, graph breaks, time; cudagraphs refused"
_REST = "later calls"

ORDER: tuple[Rank, ...] = (
    # the five steps the first session found broken, rerun first: did the fixes hold?
    Rank("tests/gpu/test_residency_gpu.py", "off", 27, True, _FIXED),
    Rank("tests/gpu/test_residency_gpu.py", "on", 25, True, _FIXED),
    Rank("tests/gpu/test_tiled_vae_gpu.py", "on", 33, True, _FIXED),
    Rank("tests/gpu/test_bound_gauges_gpu.py", "on", 7, True, _FIXED),
    Rank("bench/activations_gpu.py", "on", 60, False, _FIXED),  # failed at 8 s on its first family
    Rank("tests/gpu/test_aimdo_hooks_gpu.py", "on", 10, False, _AIMDO),  # aimdo 0.6 from .gpu-wheels
    Rank("bench/residency_gpu.py", "off", 100, False, _RESIDENCY),  # two SD1.5 experts, 2 repeats
    Rank("bench/residency_gpu.py", "on", 100, False, _RESIDENCY),
    Rank("bench/host_repeat_gpu.py", "on", 180, False, _REPEAT),  # ~10.5 GiB of weights, 2 x 2 x 4 runs
    Rank("bench/streaming_gpu.py", "*", 150, False, _STREAM),
    Rank("bench/gpu_throughput_gpu.py", "*", 60, False, _KERNELS),
    Rank("tests/gpu/test_streaming_gpu.py", "on", 9, True, _PEAK),
    Rank("bench/prefetch_gpu.py", "on", 60, False, _PEAK),
    Rank("bench/tiled_vae.py", "on", 240, False, _DECODE),  # 8 families x 2 sizes x fp32 and bf16
    # inductor compiles a tiny SD1.5 UNet twice (stock, streamed) at 512x512, 8 steps; streams with
    # DynamicVRAM off only (on, only the cudagraphs refusal runs)
    Rank("tests/gpu/test_torch_compile_gpu.py", "off", 150, False, _COMPILE),
    # 8. recovery from an OOM at the card's edge: no GPU step measures it yet (MISSING)
    Rank("bench/dynamic_vram_gpu.py", "on", 180, False, _REST),
    Rank("bench/stream_samplers_gpu.py", "on", 120, False, _REST),
    Rank("bench/text_encoder_stream_gpu.py", "*", 90, False, _REST),
    Rank("bench/gguf_stream_gpu.py", "on", 90, False, _REST),
    Rank("tests/gpu/test_host_2026_gpu.py", "on", 12, True, _REST),
    Rank("tests/gpu/test_recording_gpu.py", "on", 6, True, _REST),
    Rank("tests/gpu/test_read_through_gpu.py", "off", 30, False, _REST),
    Rank("bench/read_through_gpu.py", "off", 60, False, _REST),
    Rank("tests/gpu/test_tiled_vae_gpu.py", "off", 33, False, _REST),  # as "on"
    Rank("tests/gpu/test_bound_gauges_gpu.py", "off", 6, True, _REST),
    Rank("tests/gpu/test_streaming_gpu.py", "off", 8, True, _REST),
    Rank("tests/gpu/test_host_2026_gpu.py", "off", 10, True, _REST),
    Rank("tests/gpu/test_recording_gpu.py", "off", 5, True, _REST),
    Rank("tests/gpu/test_torch_compile_gpu.py", "on", 30, False, _REST),  # the refusal only
)
# What the order asks for that no step measures yet: said by --dry-run, never silently dropped.
MISSING = ("8. recovery from an OOM at the card's edge: no GPU test or benchmark of it exists yet",)

# A benchmark's arguments for --rehearse (instead of its GPU arguments; --out/--json are kept).
REHEARSE: dict[str, list[str]] = {
    "bench/activations_gpu.py": ["--dry-run"],
    "bench/dynamic_vram_gpu.py": ["--cpu-smoke"],
    "bench/host_repeat_gpu.py": ["--dry-run"],
    "bench/prefetch_gpu.py": ["--cpu-smoke"],
    "bench/read_through_gpu.py": ["--cpu-smoke"],
    "bench/residency_gpu.py": ["--size", "tiny", "--res", "64", "--steps", "2", "--repeats", "1"],
    "bench/stream_samplers_gpu.py": ["--cpu-smoke"],
    "bench/text_encoder_stream_gpu.py": ["--dry-run"],
    "bench/gpu_throughput_gpu.py": ["--device", "cpu", "--quick", "--repeat", "2"],
    "bench/tiled_vae.py": ["--vaes", "sd", "--sizes", "tiny"],
}


class OrderedStep(Protocol):
    name: str
    kind: str
    timeout: int
    skip: str | None
    host_rank: int
    deselected: bool  # left out by --only or --from
    expected: int
    measured: bool
    argv: list[str]
    notes: list[str]


S = TypeVar("S", bound=OrderedStep)


def mode_of(name: str) -> str:
    """ "on", "off" or "" (no --hosts, or a host without DynamicVRAM) from a step's name."""
    return "on" if DVRAM_ON in name else "off" if DVRAM_OFF in name else ""


def file_of(name: str) -> str:
    return name.split(" @ ", 1)[0]


def rank_of(name: str) -> int | None:
    """The step's place in ORDER, or None when unranked. A step with no mode takes its file's first rank."""
    file, mode = file_of(name), mode_of(name)
    for i, r in enumerate(ORDER):
        if r.file == file and (r.mode == "*" or not mode or r.mode == mode):
            return i
    return None


def expected(name: str, kind: str) -> tuple[int, bool]:
    """(seconds expected on an H100/H200, measured on the H200 or not)."""
    i = rank_of(name)
    if i is None:  # unranked in this mode: the same file in another mode takes about as long
        i = next((k for k, r in enumerate(ORDER) if r.file == file_of(name)), None)
    if i is not None:
        return ORDER[i].seconds, ORDER[i].measured
    return (DEFAULT_TEST_EXPECTED if kind == "pytest" else DEFAULT_BENCH_EXPECTED), False


def why(name: str) -> str:
    i = rank_of(name)
    return ORDER[i].why if i is not None else _REST


def ordered(steps: Sequence[S]) -> list[S]:
    """By host (the first of --hosts first), then by ORDER, then as found; a step ranked twice (a file
    whose one mode is ranked, run without --hosts) keeps its first rank."""
    found = {id(s): i for i, s in enumerate(steps)}

    def key(s: S) -> tuple[int, int, int]:
        i = rank_of(s.name)
        return (s.host_rank, len(ORDER) if i is None else i, found[id(s)])

    return sorted(steps, key=key)


def seconds(step: OrderedStep) -> int:
    """What a step costs a call: its expected seconds, never more than its timeout."""
    return min(expected(step.name, step.kind)[0], step.timeout)


def calls(steps: Sequence[OrderedStep], budget: int = CALL_BUDGET) -> list[int]:
    """The device call (1, 2, ...) of each step, packing in order by expected seconds up to ``budget``
    a call (a step longer than that is a call of its own); 0 for a step --only or --from left out.
    Steps this machine cannot run (no CUDA here) keep their call: the dry run here shows the device's."""
    out, call, used = [], 1, 0
    for step in steps:
        if step.deselected:
            out.append(0)
            continue
        cost = seconds(step)
        if used and used + cost > budget:
            call, used = call + 1, 0
        used += cost
        out.append(call)
    return out


def from_step(steps: Sequence[OrderedStep], start: str) -> int:
    """Index of the step ``--from`` names: its number in the order (1-based) or a part of its name."""
    if start.isdigit():
        if not 1 <= int(start) <= len(steps):
            raise ValueError(f"--from {start}: there are {len(steps)} steps")
        return int(start) - 1
    for i, s in enumerate(steps):
        if start in s.name:
            return i
    raise ValueError(f"--from {start!r}: no step's name contains it")


def split(steps: Sequence[OrderedStep], part: int, budget: int) -> int:
    """Keep part ``part``: the steps of the ``part``-th device call (consecutive steps packed in order by
    their expected seconds up to ``budget``; a step longer than that is a call of its own); the others
    are skipped. Returns how many parts there are."""
    where = calls(steps, budget)
    parts = max(where, default=0)
    if not 1 <= part <= parts:
        raise ValueError(f"--part {part}: there are {parts} parts of at most {budget} s")
    for step, k in zip(steps, where, strict=True):
        if k and k != part and step.skip is None:
            step.skip = f"in part {k} of {parts}"
    return parts


def start_from(steps: Sequence[OrderedStep], start: str) -> None:
    """--from: leave out the steps before the one named (they ran in an earlier call)."""
    first = from_step(steps, start)
    for step in steps[:first]:
        step.skip, step.deselected = step.skip or f"before --from {start}", True


def dry_run(steps: Sequence[OrderedStep], budget: int) -> list[str]:
    """The order, each step's expected seconds (measured or estimated), and each device call's total."""
    where = calls(steps, budget)
    lines = [f"order of value ({len(steps)} steps; one device call: {budget} s of expected time):"]
    totals: dict[int, int] = {}
    for i, (s, call) in enumerate(zip(steps, where, strict=True), 1):
        if call and call not in totals:
            lines.append(f"-- device call {call}")
        if call:
            totals[call] = totals.get(call, 0) + seconds(s)
        exp = f"{s.expected} s {'measured' if s.measured else 'estimated'}"
        what = f"skip: {s.skip}" if s.skip else "run"
        lines.append(f"{i:2}. {s.name}  [expected {exp}; timeout {s.timeout} s]  {what}")
        lines.append(f"      {why(s.name)}; $ {' '.join(s.argv[1:])}")
        lines += [f"      note: {n}" for n in s.notes]
    lines += [f"not in the runbook: {m}" for m in MISSING]
    lines += [f"device call {k}: {t} s expected (budget {budget} s)" for k, t in sorted(totals.items())]
    return lines
