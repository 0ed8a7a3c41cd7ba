"""Which blocks stay on the device and how far ahead the rest are uploaded, from a VRAM budget.

A step is a pipeline: a streamed block can compute once its upload is done, and an upload can start
once a ring slot is free (the block d+1 places earlier has computed) and the copy engine is idle.
``step_time`` simulates that pipeline; ``choose_streaming`` keeps resident the blocks whose upload
its own compute hides least (bytes over bandwidth minus compute: not "the first N"), as many as the
room after the ring allows, for each prefetch depth, and keeps the fastest. With no compute figures
yet (before calibration) the key is bytes alone, which minimises the streamed bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..units import format_bytes
from .ledger import BudgetExceeded

DEPTHS = (1, 2, 3)


@dataclass(frozen=True)
class StreamingChoice:
    resident: frozenset[int]  # block indices kept on the device
    depth: int  # d: uploads in flight ahead of the computing block; the ring has d + 1 slots
    slot_bytes: int  # one ring slot: the largest streamed block
    streamed_bytes: int  # uploaded once per step
    device_bytes: int  # rest + resident blocks + ring (activations not included)
    step_s: float  # predicted step time from the pipeline model
    bound_s: float  # max(compute, streamed bytes / bandwidth)
    requested_depth: int | None = None  # the depth asked for, when more than the streamed blocks allow


def step_time(
    block_bytes: Sequence[int],
    compute_s: Sequence[float],
    resident: frozenset[int],
    depth: int,
    bandwidth: float,
) -> float:
    """One step of the pipeline in steady state (the second of two simulated steps).

    Upload k goes into slot k mod (d+1); it starts when the previous upload is done (one copy engine)
    and the block that last used its slot has computed; a block computes after the one before it
    and, when streamed, after its upload.
    """
    n = len(block_bytes)
    streamed = [i for i in range(n) if i not in resident]
    if not streamed:
        return float(sum(compute_s))
    upload_end: list[float] = []
    compute_end: list[float] = []  # per upload index
    t = start = 0.0
    for p in range(2):
        if p == 1:
            start = t
        for i in range(n):
            if i in resident:
                t += compute_s[i]
                continue
            k = len(upload_end)
            slot_free = compute_end[k - depth - 1] if k > depth else 0.0
            upload_end.append(max(upload_end[-1] if k else 0.0, slot_free) + block_bytes[i] / bandwidth)
            t = max(t, upload_end[k]) + compute_s[i]
            compute_end.append(t)
    return t - start


def choose_streaming(
    block_bytes: Sequence[int],
    rest_bytes: int,
    budget: int,
    activation_bytes: int = 0,
    *,
    compute_s: Sequence[float] | None = None,
    bandwidth: float = 25e9,
    depth: int | None = None,
    resident_blocks: int | None = None,
) -> StreamingChoice:
    """The resident set and depth for ``budget`` device bytes; raises BudgetExceeded if none fits.

    ``depth`` and ``resident_blocks`` override the automatic choice (the node's inputs).
    """
    n = len(block_bytes)
    compute = list(compute_s) if compute_s is not None else [0.0] * n
    key = sorted(range(n), key=lambda i: (-(block_bytes[i] / bandwidth - compute[i]), -block_bytes[i], i))
    room = budget - activation_bytes - rest_bytes
    everything = sum(block_bytes)
    if (resident_blocks is None or resident_blocks >= n) and everything <= room and depth is None:
        return StreamingChoice(
            frozenset(range(n)), 0, 0, 0, rest_bytes + everything, sum(compute), sum(compute)
        )
    best: StreamingChoice | None = None
    # an explicit depth is a ceiling: the deepest ring at most that deep that the budget holds (and
    # never deeper than the streamed blocks: a slot per streamed block is already every upload ahead)
    depths = tuple(range(min(depth, max(n - 1, 0)), -1, -1)) if depth is not None else DEPTHS
    if depth is None and _fill(block_bytes, key, room, min(DEPTHS), 0) is None:
        depths = (0,)  # no ring of two blocks fits: one slot, uploads wait (the planner's last resort)
    for asked in depths:
        resident = _fill(block_bytes, key, room, asked, resident_blocks)
        if resident is None:
            continue
        resident = _improve(block_bytes, compute, resident, _capped(asked, n - len(resident)), bandwidth)
        streamed = [i for i in range(n) if i not in resident]
        d = _capped(asked, len(streamed))
        slot = max((block_bytes[i] for i in streamed), default=0)
        streamed_bytes = sum(block_bytes[i] for i in streamed)
        used = rest_bytes + sum(block_bytes[i] for i in resident) + ((d + 1) * slot if streamed else 0)
        choice = StreamingChoice(
            frozenset(resident),
            d,
            slot,
            streamed_bytes,
            used,
            step_time(block_bytes, compute, frozenset(resident), d, bandwidth),
            max(sum(compute), streamed_bytes / bandwidth),
            depth if depth is not None and depth > d else None,
        )
        if depth is not None:
            best = choice
            break
        if best is None or (choice.step_s, choice.streamed_bytes) < (best.step_s, best.streamed_bytes):
            best = choice
    if best is None:
        need = rest_bytes + activation_bytes + max(block_bytes, default=0)  # a ring of one slot
        raise BudgetExceeded(
            f"a VRAM budget of {format_bytes(budget)} cannot stream this model: it needs at least "
            f"{format_bytes(need)} (non-block weights, activations and one slot for its largest block)"
        )
    return best


def _capped(depth: int, streamed: int) -> int:
    """A ring never needs more slots than there are streamed blocks: depth at most streamed - 1."""
    return max(0, min(depth, streamed - 1))


def _fill(
    block_bytes: Sequence[int], key: list[int], room: int, depth: int, limit: int | None
) -> set[int] | None:
    """Blocks in ``key`` order while they fit beside a ring for what is still streamed."""
    n = len(block_bytes)
    resident: set[int] = set()

    def ring(res: set[int]) -> int:
        streamed = [block_bytes[i] for i in range(n) if i not in res]
        return (_capped(depth, len(streamed)) + 1) * max(streamed) if streamed else 0

    def fits(res: set[int]) -> bool:
        return sum(block_bytes[j] for j in res) + ring(res) <= room

    # while nothing fits yet, blocks are added anyway: each one made resident may shrink the ring
    # (fewer streamed blocks, fewer slots), so a deep ring can still fit with more blocks resident
    for i in key:
        if limit is not None and len(resident) >= limit:
            break
        trial = resident | {i}
        if fits(trial) or not fits(resident):
            resident = trial
    return resident if fits(resident) else None


def _improve(
    block_bytes: Sequence[int], compute: Sequence[float], resident: set[int], depth: int, bandwidth: float
) -> set[int]:
    """Swap resident and streamed blocks of no more bytes while the simulated step gets faster.

    Where resident blocks sit matters: spread between streamed ones, their compute hides the
    uploads; bunched together, the ring runs dry. Starts from the evenly spaced set of equal size
    when the blocks are uniform, then improves one swap at a time (bounded passes).
    """
    n = len(block_bytes)
    if not resident or len(resident) == n or not any(compute):
        return resident
    k = len(resident)
    if len(set(block_bytes)) == 1:  # uniform blocks: any k fit; start evenly spaced
        spread = {round((j + 0.5) * n / k - 0.5) for j in range(k)}
        if len(spread) == k:
            resident = spread
    best = step_time(block_bytes, compute, frozenset(resident), depth, bandwidth)
    for _ in range(MAX_PASSES):
        improved = False
        for r in sorted(resident):
            for s in range(n):
                if s in resident or block_bytes[s] > block_bytes[r]:
                    continue
                trial = (resident - {r}) | {s}
                t = step_time(block_bytes, compute, frozenset(trial), depth, bandwidth)
                if t < best - 1e-12:
                    resident, best, improved = trial, t, True
                    break
        if not improved:
            break
    return resident


MAX_PASSES = 4
