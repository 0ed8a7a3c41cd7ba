"""The planner is the exact optimum of its cost model: checked against brute force, including random
cases, and against the closed-form minimum VRAM."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, event, given, settings

from comfyui_headroom.memory.planning.baselines import lower_bound
from comfyui_headroom.memory.planning.costmodel import Budget, Hardware, Tier, pinned_tiers
from comfyui_headroom.memory.planning.planner import minimum_vram, plan
from comfyui_headroom.memory.planning.workload import Component, Step, Workload
from comfyui_headroom.memory.units import GB
from headroom_testing.bruteforce import brute_force, search_space
from headroom_testing.sample_workloads import flux_like
from headroom_testing.strategies import workloads

HW = Hardware.pcie(4)


def test_everything_fits_in_a_big_card() -> None:
    w = flux_like()
    p = plan(w, Budget(vram=80 * 2**30, ram=128 * 2**30, pinned=64 * 2**30), HW)
    assert p.feasible
    assert p.steps[2].placements["dm"].tier.gpu == "G"
    # each model is read once from disk and uploaded once: nothing streams, nothing returns
    assert p.transfer_s == pytest.approx(brute_force(w, p.budget, HW))


def test_flux_streams_on_an_8gb_card() -> None:
    w = flux_like()
    budget = Budget.from_card(8 * 2**30, 32 * 2**30)
    p = plan(w, budget, HW)
    assert p.feasible
    dm = p.steps[2].placements["dm"]
    assert dm.tier.gpu == "S" and 0 < dm.resident_blocks < dm.total_blocks
    assert all(s.vram_peak <= budget.vram for s in p.steps)
    assert all(s.ram <= budget.ram and s.pinned <= budget.pinned for s in p.steps)
    assert any(a.kind == "stream" and a.component == "dm" for a in p.steps[2].actions)


def test_an_impossible_budget_reports_the_minimum() -> None:
    w = flux_like()
    need, where = minimum_vram(w, depth=0)  # the least of any depth: synchronous streaming
    assert "VAEDecode" in where or "KSampler" in where
    p = plan(w, Budget(vram=need - 1, ram=64 * 2**30, pinned=32 * 2**30), HW)
    assert not p.feasible and p.min_vram == need
    assert plan(w, Budget(vram=need, ram=64 * 2**30, pinned=32 * 2**30), HW).feasible


def test_a_reused_model_stays_where_reuse_is_cheapest() -> None:
    model = Component("m", "model", 4 * 2**30)
    steps = (Step("1", "A", ("m",)), Step("2", "Other"), Step("3", "B", ("m",)))
    w = Workload((model,), steps)
    big = plan(w, Budget(vram=8 * 2**30, ram=16 * 2**30, pinned=8 * 2**30), HW)
    assert big.steps[1].placements["m"].tier.gpu == "G"  # kept on the GPU across the gap
    assert big.transfer_s == pytest.approx(model.bytes / HW.disk)
    tight = Workload((model,), (steps[0], Step("2", "Other", activation=5 * 2**30), steps[2]))
    small = plan(tight, Budget(vram=8 * 2**30, ram=16 * 2**30, pinned=8 * 2**30), HW)
    assert small.steps[1].placements["m"].tier == Tier.PINNED  # parked in pinned RAM, not re-read


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_planner_matches_brute_force(case: tuple[Workload, Budget]) -> None:
    w, budget = case
    assume(search_space(w) <= 60_000)
    expected = brute_force(w, budget, HW)
    p = plan(w, budget, HW)
    event("feasible" if math.isfinite(expected) else "infeasible")
    streams = any(pl.tier.gpu == "S" for s in p.steps for pl in s.placements.values())
    event("streams" if streams else "no stream")
    if any(sum(pl.tier.gpu == "S" for pl in s.placements.values()) > 1 for s in p.steps):
        event("two stream in one step")
    if math.isinf(expected):
        assert not p.feasible
    else:
        assert p.feasible
        assert p.transfer_s == pytest.approx(expected, rel=1e-9)
        assert sum(s.transfer_s for s in p.steps) == pytest.approx(expected, rel=1e-9)
        for s in p.steps:
            assert s.ram <= budget.ram and s.pinned <= budget.pinned
        if not w.initial:  # the bound prices every first load from disk
            assert lower_bound(w, budget, HW).transfer_s <= p.transfer_s * (1 + 1e-9)
        for s in p.steps:  # a residency choice is honoured at every step
            for cid, pl in s.placements.items():
                assert pl.tier in pinned_tiers(w.component(cid).pin, tuple(Tier))


def test_two_models_of_one_step_stream_together_sharing_one_ring() -> None:
    # HiDream's text encode runs four encoders in one node; none fits beside the others on 6 GB
    block = int(0.25 * GB)
    llama = Component("llama", "llama", 9 * GB, (block,) * 32)
    t5 = Component("t5", "t5", 5 * GB, (block,) * 19)
    w = Workload((llama, t5), (Step("1", "CLIPTextEncode", ("llama", "t5")),))
    budget = Budget(vram=6 * GB, ram=32 * GB, pinned=16 * GB)
    p = plan(w, budget, HW)
    assert p.feasible
    placements = p.steps[0].placements
    assert placements["llama"].tier.gpu == "S" and placements["t5"].tier.gpu == "S"
    assert p.steps[0].vram_peak <= budget.vram
    # one ring of the largest block, whatever the depth, plus the non-block bytes of each
    depth = p.prefetch_depth
    rest = llama.bytes + t5.bytes - 51 * block
    assert minimum_vram(w, depth)[0] == rest + (depth + 1) * block
    assert "streaming llama, t5" in minimum_vram(w, depth)[1]
    assert brute_force(w, budget, HW) == pytest.approx(p.transfer_s, rel=1e-9)


def test_a_streamed_component_needs_room_for_its_whole_host_copy() -> None:
    """The streamer keeps the host copy of the resident blocks and the rest: a stream from RAM needs
    RAM for the whole component, not for its streamed blocks only."""
    block = 1 * GB
    model = Component("m", "model", 10 * GB, (block,) * 9)  # 1 GB outside the blocks
    w = Workload((model,), (Step("1", "KSampler", ("m",), evaluations=4),))
    roomy = plan(w, Budget(vram=7 * GB, ram=32 * GB, pinned=0), HW)
    p = roomy.steps[0].placements["m"]
    assert p.tier.gpu == "S" and p.tier.host in "PR" and 0 < p.resident_blocks < 9  # pinning nothing
    assert (p.pinned_bytes, p.pageable_bytes) == (0, model.bytes) and roomy.steps[0].ram == model.bytes
    # RAM for the streamed blocks only, not for the resident ones: it streams from its file instead
    tight = Budget(vram=7 * GB, ram=p.streamed_bytes + block, pinned=0)
    capped = plan(w, tight, HW)
    assert capped.steps[0].placements["m"].tier == Tier.STREAM_DISK and capped.steps[0].ram == 0
    assert brute_force(w, tight, HW) == pytest.approx(capped.transfer_s, rel=1e-9)


def test_synchronous_streaming_is_the_last_resort_below_a_ring_of_two_blocks() -> None:
    block = 1 * GB
    model = Component("m", "model", 10 * GB, (block,) * 9)  # 1 GB outside the blocks
    w = Workload((model,), (Step("1", "KSampler", ("m",), evaluations=4),))
    ring_of_two = minimum_vram(w, 1)[0]
    tight = Budget(vram=ring_of_two - block // 2, ram=32 * GB, pinned=16 * GB)
    p = plan(w, tight, HW)
    assert p.feasible and p.prefetch_depth == 0
    assert p.min_vram == minimum_vram(w, 0)[0] == 2 * GB
    assert brute_force(w, tight, HW) == pytest.approx(p.transfer_s, rel=1e-9)
    # without prefetch the uploads do not hide behind compute: wall time includes all of them
    assert p.wall_s >= p.transfer_s
    roomy = Budget(vram=ring_of_two, ram=32 * GB, pinned=16 * GB)
    assert plan(w, roomy, HW).prefetch_depth >= 1, "with room for a ring, uploads overlap compute"


def test_a_replan_starts_from_where_the_components_are() -> None:
    w = flux_like()
    cold = plan(w, Budget.from_card(24 * GB, 64 * GB), HW)
    warm_w = Workload(w.components, w.steps, initial={"te": Tier.GPU_RAM})
    warm = plan(warm_w, Budget.from_card(24 * GB, 64 * GB), HW)
    assert warm.transfer_s < cold.transfer_s  # the text encoder is already on the GPU
    assert not any((a.kind, a.component) == ("load", "te") for a in warm.steps[0].actions)
    assert any((a.kind, a.component) == ("load", "te") for a in cold.steps[0].actions)


def test_a_residency_choice_binds_the_plan() -> None:
    w = flux_like()
    te = w.component("te")
    pinned = Workload(
        (Component("te", te.label, te.bytes, te.blocks, pin="disk"), *w.components[1:]), w.steps
    )
    p = plan(pinned, Budget.from_card(24 * GB, 64 * GB), HW)
    assert p.feasible
    assert {s.placements["te"].tier.host for s in p.steps if "te" in s.placements} == {"D"}
    with pytest.raises(ValueError, match="unknown residency"):
        Component("x", "x", 10, pin="vram")


def test_many_live_components_plan_with_the_least_ones_held_and_a_note() -> None:
    """A 2026 template keeps 11 models live at one node: 6**11 joint placements. The planner holds the
    components that matter least at one tier per use until every node is within EXACT_STATES, and says so;
    a workflow within it stays exact (no note)."""
    from comfyui_headroom.memory.planning.bounded import EXACT_STATES

    comps = tuple(Component(f"c{i}", f"lora{i}", (100 + i) << 20, blocks=(50 << 20,)) for i in range(11))
    steps = (
        Step("1", "Load", tuple(c.id for c in comps)),
        Step("2", "KSampler", tuple(c.id for c in comps), evaluations=4),
    )
    budget = Budget.from_card(24 * GB, 64 * GB)
    p = plan(Workload(comps, steps), budget, Hardware.pcie(4))
    assert p.feasible and len(p.notes) == 1
    assert p.notes[0].startswith("5 of 11 model components held at one tier per use (lora0, lora1, lora2,")
    assert f"more than {EXACT_STATES:,} joint placements" in p.notes[0]
    few = Workload(comps[:6], tuple(Step(s.node_id, s.label, s.uses[:6]) for s in steps))
    assert 6**6 <= EXACT_STATES
    exact = plan(few, budget, Hardware.pcie(4))
    assert exact.feasible and exact.notes == ()
