"""The plan's decisions on a DynamicVRAM host (``memory.residency.dynamic_policy``): which models lose
their pages at a boundary and in what order, how the idle ones are ranked in the host's priority list,
which are warmed, and the next queued run of the same workflow."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from comfyui_headroom.memory.planning.costmodel import Tier
from comfyui_headroom.memory.planning.planner import Placement, StepPlan
from comfyui_headroom.memory.planning.workload import Step
from comfyui_headroom.memory.residency.dynamic_policy import (
    ORDER,
    RELEASE,
    WARM,
    Resident,
    boundary_moves,
    next_use,
    repeat_uses,
    stream_note,
)

GiB = 2**30
HIGH, LOW, CLIP, VAE = "high", "low", "clip", "vae"


def steps(*rows: tuple[str, tuple[str, ...], tuple[str, ...]]) -> list[StepPlan]:
    """(node, uses, kept on the device) per step."""
    return [
        StepPlan(Step(node, "Node", uses), {c: Placement(Tier.GPU_RAM) for c in kept}, 0, 0, 0, 0.0)
        for node, uses, kept in rows
    ]


WAN = steps(
    ("4", (CLIP,), (CLIP,)), ("7", (HIGH,), (HIGH,)), ("8", (LOW,), (LOW,)), ("9", (VAE,), (VAE,))
)  # fmt: skip


def held(**pages: float) -> list[Resident]:
    sizes = {HIGH: 14, LOW: 14, CLIP: 6, VAE: 0.25}
    return [Resident(c, c, int(p * GiB), int(sizes[c] * GiB)) for c, p in pages.items()]


def test_next_use_counts_nodes_in_this_prompt_then_in_the_next_queued_run() -> None:
    assert next_use(WAN, 1, LOW) == 1 and next_use(WAN, 1, VAE) == 2
    assert next_use(WAN, 2, HIGH) is None
    assert next_use(WAN, 2, HIGH, after=[(CLIP,), (HIGH,)]) == 3  # two nodes left here, then the second


def test_the_plans_evictions_are_released_to_the_host_farthest_lowest_never_paged_out_whole() -> None:
    moves = boundary_moves(WAN, 2, held(high=14, clip=6, vae=0.25))
    # deprioritize calls, nearest first: the VAE (next node), then clip, then high (never again, larger)
    assert [(m.action, m.component_id) for m in moves] == [(ORDER, VAE), (ORDER, CLIP), (ORDER, HIGH)]
    assert all(m.released for m in moves)  # all off in the plan at node 8: the host frees them on demand
    assert moves[2].nbytes == 14 * GiB
    assert "not needed again in this prompt" in moves[2].why and "node 8" in moves[2].why
    assert "needed again in 1 node;" in moves[0].why and "released to the host" in moves[0].why


def test_the_nodes_own_model_and_models_without_pages_are_left_to_the_host() -> None:
    moves = boundary_moves(WAN, 2, held(low=3, high=0, clip=6))
    assert [(m.action, m.component_id) for m in moves] == [(ORDER, CLIP)]
    assert not boundary_moves(WAN, 2, held(low=3))


def test_idle_models_the_plan_keeps_are_deprioritized_nearest_first_so_the_farthest_ends_lowest() -> None:
    plan = steps(
        ("7", (HIGH,), (HIGH, CLIP, VAE)),
        ("5", (CLIP,), (HIGH, CLIP, VAE)),
        ("8", (LOW,), (HIGH, CLIP, LOW, VAE)),
        ("9", (HIGH,), (HIGH, VAE)),
        ("10", (VAE,), (VAE,)),
    )
    moves = boundary_moves(plan, 2, held(high=14, clip=6, vae=0.25))
    assert [(m.action, m.component_id) for m in moves] == [(ORDER, HIGH), (ORDER, VAE), (ORDER, CLIP)]
    assert not any(m.released for m in moves) and "kept on the device by the plan" in moves[0].why
    # aimdo's list after those calls (deprioritize inserts at the bottom), from the host's recency order
    priority = [HIGH, CLIP, VAE, LOW]  # lowest first: the loads in the order the nodes ran
    for m in moves:
        priority.remove(m.component_id)
        priority.insert(0, m.component_id)
    assert priority == [CLIP, VAE, HIGH, LOW]
    resident = {HIGH: 14 * GiB, CLIP: 6 * GiB, VAE: GiB // 4}
    # the low expert's faults need 8 GiB: by recency they take the high expert's pages (needed next)
    assert recency_victims([HIGH, CLIP, VAE, LOW], 8 * GiB, resident) == [(HIGH, 8 * GiB)]
    assert recency_victims(priority, 8 * GiB, resident) == [
        (CLIP, 6 * GiB),
        (VAE, GiB // 4),
        (HIGH, 7 * GiB // 4),
    ]


def test_a_model_the_next_node_needs_is_warmed_when_the_host_evicted_part_of_it() -> None:
    moves = boundary_moves(WAN, 1, held(low=4, clip=0))
    warm = [m for m in moves if m.action == WARM]
    assert [(m.component_id, m.nbytes) for m in warm] == [(LOW, 10 * GiB)]
    assert "node 8 computes with it next" in warm[0].why and "10 GiB" in warm[0].why
    # all off the device: the controller's own warm step reads it; all on it: nothing to read
    assert not [m for m in boundary_moves(WAN, 1, held(low=0)) if m.action == WARM]
    assert not [m for m in boundary_moves(WAN, 1, held(low=14)) if m.action == WARM]


def test_the_next_queued_run_ranks_what_this_prompt_no_longer_needs() -> None:
    after = [(CLIP,), (HIGH,), (LOW,), (VAE,)]
    alone = boundary_moves(WAN, 3, held(high=14, clip=6, low=14))
    # none needed again as far as this prompt knows: the larger end lowest
    assert [(m.action, m.component_id) for m in alone] == [(ORDER, CLIP), (ORDER, LOW), (ORDER, HIGH)]
    moves = boundary_moves(WAN, 3, held(high=14, clip=6, low=14), after)
    # deprioritized nearest first, so low (needed last in the next run) ends lowest
    assert [(m.action, m.component_id) for m in moves] == [(ORDER, CLIP), (ORDER, HIGH), (ORDER, LOW)]
    assert "in the next queued run of this workflow" in moves[0].why


PROMPT = {
    "1": {"class_type": "HeadroomOffloadLoader", "inputs": {"diffusion_model": "high.safetensors"}},
    "4": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["1", 1]}},
    "7": {"class_type": "KSamplerAdvanced", "inputs": {"model": ["1", 0], "positive": ["4", 0], "seed": 1}},
    "8": {"class_type": "KSamplerAdvanced", "inputs": {"model": ["1", 0], "latent_image": ["7", 0]}},
    "9": {"class_type": "VAEDecode", "inputs": {"samples": ["8", 0]}},
}


def changed(node: str, **inputs: object) -> dict:
    out = {k: {"class_type": v["class_type"], "inputs": dict(v["inputs"])} for k, v in PROMPT.items()}
    out[node]["inputs"].update(inputs)
    return out


@pytest.mark.parametrize(
    ("queued", "expected"),
    [
        (changed("4", text="a dog"), [(CLIP,), (HIGH,), (LOW,), (VAE,)]),  # new text: everything runs again
        (changed("7", seed=2), [(HIGH,), (LOW,), (VAE,)]),  # new seed: the encode is served from cache
        (PROMPT, []),  # the same prompt: all cached
        ({"1": PROMPT["1"]}, []),  # another workflow: nothing known
        (None, []),
    ],
)
def test_repeat_uses_follows_the_hosts_cache(queued: dict | None, expected: list) -> None:
    plan = steps(("4", (CLIP,), ()), ("7", (HIGH,), ()), ("8", (LOW,), ()), ("9", (VAE,), ()))
    assert repeat_uses(plan, PROMPT, queued) == expected


def test_the_streamer_note_names_the_way_out() -> None:
    assert stream_note(False) == ""
    assert "--disable-dynamic-vram" in stream_note(True) and "not streamed" in stream_note(True)


def test_the_benchs_page_model_predicts_fewer_uploads_with_the_plan_than_by_recency() -> None:
    """bench/dynamic_vram_gpu.py's prediction of the GPU row: a queue of two-expert Wan runs (the encoder
    re-runs each time) at a cap where two experts and a half fit. By recency each run uploads what the
    last one evicted; with the plan's order the next run's models keep their pages."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "dynamic_vram_gpu.py"
    spec = importlib.util.spec_from_file_location("dynamic_vram_gpu", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    sizes = {c: int(g * GiB) for c, g in bench.SIZES_GIB.items()}
    recency = bench.simulate(sizes, 9 * GiB, 4, planned=False)
    planned = bench.simulate(sizes, 9 * GiB, 4, planned=True)
    assert recency[0] == planned[0] == sum(sizes.values())  # both start empty
    assert recency[1:] == [5 * GiB] * 3
    assert all(p <= r / 2 for p, r in zip(planned[1:], recency[1:], strict=True)), planned


def test_a_model_not_needed_again_nor_in_the_next_run_gives_its_pins_back() -> None:
    """Wan 2.2 at the high expert's node, the same workflow queued again with a new seed (its encode is
    served from the host's cache): the encoder's pins go back, the experts' and the VAE's stay."""
    pins = {CLIP: 6 * GiB, HIGH: 0, LOW: 13 * GiB, VAE: GiB // 4}
    resident = [Resident(c, c, 0, 1, pins[c]) for c in (CLIP, HIGH, LOW, VAE)]
    repeat = [(HIGH,), (LOW,), (VAE,)]
    moves = [m for m in boundary_moves(WAN, 1, resident, repeat) if m.action == RELEASE]
    assert [(m.component_id, m.nbytes) for m in moves] == [(CLIP, 6 * GiB)]
    assert "nor in the next queued run" in moves[0].why and "most recently loaded" in moves[0].why
    # the next run encodes again (another prompt text): the encoder keeps its pins
    assert not [m for m in boundary_moves(WAN, 1, resident, [(CLIP,), *repeat]) if m.action == RELEASE]
    # a model the node computes with is the host's, whatever the plan says later
    assert not [m for m in boundary_moves(WAN, 0, resident) if m.component_id == CLIP]


def recency_victims(order: Sequence[str], need: int, resident: Mapping[str, int]) -> list[tuple[str, int]]:
    """What the host frees for ``need`` bytes with its own order (``order``: lowest priority first):
    pages from the lowest-priority model up, as ``vbars_free_for_vbar`` does (the
    host's own order, to compare the plan's with)."""
    freed = []
    for cid in order:
        if need <= 0:
            break
        take = min(need, resident.get(cid, 0))
        if take:
            freed.append((cid, take))
            need -= take
    return freed
