"""Every placement says why it is there, and every figure in the sentence is the plan's own: the VRAM peak,
the budget, the RAM left, the next use and the transfer seconds the plan priced the moves at."""

from __future__ import annotations

from dataclasses import replace

import pytest

from comfyui_headroom.memory.planning.costmodel import Budget, Hardware, Tier, transition_seconds
from comfyui_headroom.memory.planning.planner import Plan, plan
from comfyui_headroom.memory.planning.reasons import step_reasons
from comfyui_headroom.memory.planning.report import plan_json
from comfyui_headroom.memory.planning.workload import Component, Step, Workload
from comfyui_headroom.memory.units import GiB, format_bytes
from headroom_testing.sample_workloads import flux_like

HW = Hardware.pcie(4)


def test_every_live_placement_has_a_reason() -> None:
    for card in (8, 24, 80):
        p = plan(flux_like(), Budget.from_card(card * GiB, 32 * GiB), HW)
        assert p.feasible
        assert all(pl.reason for sp in p.steps for pl in sp.placements.values())


def test_on_gpu_quotes_the_step_peak_and_the_budget() -> None:
    budget = Budget(vram=80 * GiB, ram=128 * GiB, pinned=64 * GiB)
    p = plan(flux_like(), budget, HW)
    sp = p.steps[2]
    assert sp.placements["dm"].reason.startswith(
        f"on GPU: used here, fits ({format_bytes(sp.vram_peak, 'GiB')} of 80.00 GiB)"
    )


def test_a_streamed_model_says_why_it_does_not_fit_and_what_it_costs() -> None:
    w = flux_like()
    budget = Budget.from_card(8 * GiB, 32 * GiB)
    p = plan(w, budget, HW)
    sp, dm = p.steps[2], w.component("dm")
    placement = sp.placements["dm"]
    assert placement.tier.gpu == "S"
    reason = placement.reason
    assert reason.startswith(
        f"streamed from {'pinned RAM' if placement.tier == Tier.STREAM_PINNED else 'RAM'}: "
        f"{format_bytes(dm.bytes, 'GiB')} does not fit the {format_bytes(budget.vram, 'GiB')} budget beside "
        f"{format_bytes(sp.step.activation_min, 'GiB')} of activations;"
    )
    assert f"; {placement.resident_blocks} of {placement.total_blocks} blocks resident" in reason
    # the seconds quoted are the plan's own for this node: it moves only this model here
    assert {a.component for a in sp.actions if a.seconds} == {"dm"}
    assert f"; {sp.transfer_s:.2f} s of transfer vs " in reason


def gap(activation: int, ram: int, other: bool = False) -> tuple[Workload, Plan]:
    """A model used at nodes 1 and 3, with node 2 needing ``activation`` bytes of VRAM in between."""
    m = Component("m", "model", 4 * GiB)
    comps = (m, Component("o", "other", 1 * GiB)) if other else (m,)
    uses = ("m", "o") if other else ("m",)
    steps = (Step("1", "A", uses), Step("2", "Other", activation=activation), Step("3", "B", uses))
    w = Workload(comps, steps)
    return w, plan(w, Budget(vram=8 * GiB, ram=ram, pinned=ram // 2), HW)


def test_a_model_parked_in_ram_quotes_its_next_use_the_vram_it_lacks_and_both_routes() -> None:
    w, p = gap(5 * GiB, 16 * GiB)
    parked = p.steps[1].placements["m"]
    assert parked.tier == Tier.PINNED
    # the route it takes is what the plan moves for it over nodes 2 and 3; dropping it costs a disk read
    kept = p.steps[1].transfer_s + p.steps[2].transfer_s
    # the cheapest other place over the gap: pageable RAM (a d2h copy, then a slower upload) or disk
    before, after = p.steps[0].placements["m"].tier, p.steps[2].placements["m"].tier
    pageable = transition_seconds(HW, 4 * GiB, before, Tier.RAM) + transition_seconds(
        HW, 4 * GiB, Tier.RAM, after
    )
    dropped = transition_seconds(HW, 4 * GiB, Tier.DISK, after)
    assert kept < pageable < dropped
    assert parked.reason == (
        f"in pinned RAM: needed again in 1 node (node 3); {kept:.2f} s of transfer vs {pageable:.2f} s "
        "parked in RAM; off the GPU: 4.00 GiB does not fit beside the 5.00 GiB this node needs of 8.00 GiB"
    )


@pytest.mark.parametrize("ram_gib", [3.0, 3.5])
def test_on_disk_for_want_of_ram_quotes_the_ram_the_plan_leaves(ram_gib: float) -> None:
    w, p = gap(int(7.5 * GiB), int(ram_gib * GiB), other=True)
    sp = p.steps[1]
    assert sp.placements["m"].tier == Tier.DISK and sp.ram == 1 * GiB  # the other model is in RAM
    left = int(ram_gib * GiB) - sp.ram
    reason = sp.placements["m"].reason
    assert reason.startswith("on disk: needed again in 1 node (node 3);")
    # the text changes with the budget: it is the plan's figure, not a constant
    assert (
        f"; RAM budget {format_bytes(ram_gib * GiB, 'GiB')} leaves {format_bytes(left, 'GiB')} after the "
        f"other components" in reason
    )
    assert "2.00 GiB" in reason if ram_gib == 3.0 else "2.50 GiB" in reason
    assert "off the GPU: 4.00 GiB does not fit" in reason


def test_a_residency_choice_is_named_with_its_input() -> None:
    te = Component("te", "umt5", 6 * GiB, kind="text_encoder", pin="pinned_ram")
    plain = Component("x", "x", 1 * GiB, kind="upscaler", pin="disk")
    w = Workload((te, plain), (Step("1", "CLIPTextEncode", ("te", "x")),))
    p = plan(w, Budget(vram=12 * GiB, ram=32 * GiB, pinned=16 * GiB), HW)
    reasons = {cid: pl.reason for cid, pl in p.steps[0].placements.items()}
    assert reasons["te"].endswith("; pinned by your choice (text_encoder_residency = pinned_ram)")
    assert reasons["x"].endswith("; no RAM copy (read from its file) by your choice (residency = disk)")


def test_components_outside_their_uses_are_on_disk_prefetched_or_dropped() -> None:
    w = flux_like()
    p = plan(w, Budget(vram=80 * GiB, ram=128 * GiB, pinned=64 * GiB), HW)
    reasons = step_reasons(w, p)
    assert set(reasons[0]) == {"te", "dm", "vae"}  # every component at every node
    assert (
        reasons[0]["dm"]
        == "on disk: first needed in 2 nodes (node 3); nothing is loaded before its first use"
    )
    assert reasons[4]["vae"] == "dropped: not used again (last used at node 8)"
    assert reasons[3]["dm"] == "dropped: not used again (last used at node 3)"
    prefetch = next(f for f in p.steps[1].prefetched if f.component == "dm")
    assert reasons[1]["dm"] == (
        f"on disk until prefetched during this node for node 3 ({format_bytes(prefetch.bytes, 'GiB')}, "
        f"{prefetch.seconds:.2f} s beside its compute; peak with it "
        f"{format_bytes(p.steps[1].vram_peak, 'GiB')} of 80.00 GiB)"
    )
    # a live placement's reason is its own
    assert reasons[2]["dm"] == p.steps[2].placements["dm"].reason


def test_plan_json_carries_each_placements_reason() -> None:
    w = flux_like()
    p = plan(w, Budget.from_card(8 * GiB, 32 * GiB), HW)
    data = plan_json(p, w, {})
    for sp, step in zip(p.steps, data["steps"], strict=True):
        assert {c: v["reason"] for c, v in step["placements"].items()} == {
            c: pl.reason for c, pl in sp.placements.items()
        }
    # a reason is derived, never a default: a bare placement has none
    assert replace(p.steps[2].placements["dm"], reason="").reason == ""
