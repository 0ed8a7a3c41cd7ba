"""What the running prompt's plan leaves a node for its activations (memory/residency/plan_room.py), as
the Tiled VAE Decode reads it to size its tiles: the plan's budget less the weights it keeps there."""

from __future__ import annotations

import pytest

from comfyui_headroom.memory.residency.plan_room import activation_room, weights_kept

from .test_residency_controller import HW, prompt, register, setup


def started(card_gb: float, upto: str) -> tuple:
    """A planned prompt run up to node ``upto``, which has started and not finished."""
    controller, _, budget = setup(card_gb)
    run = controller.prompt_started("p1", prompt(), budget, HW)
    register(controller, run.workload)
    controller.runs.clear()
    run = controller.prompt_started("p1", prompt(), budget, HW)
    for sp in run.plan.steps:
        controller.node_started("p1", sp.step.node_id)
        if sp.step.node_id == upto:
            return controller, run, budget, sp
        controller.node_finished("p1", sp.step.node_id)
    raise AssertionError(f"node {upto} is not in the plan")


@pytest.mark.parametrize("card_gb", [48, 12])
def test_the_decode_node_gets_the_budget_less_what_the_plan_keeps_loaded_there(card_gb: float) -> None:
    controller, run, budget, sp = started(card_gb, "5")  # the VAEDecode of the prompt
    components = {c.id: c for c in run.workload.components}
    on_gpu = [cid for cid, p in sp.placements.items() if p.tier.gpu == "G"]
    assert any(components[cid].kind == "vae" for cid in on_gpu), "the decode's VAE is on the device"
    kept = sum(components[cid].bytes for cid in on_gpu)
    assert weights_kept(run, sp) == kept
    assert activation_room(controller.runs.values(), "5") == budget.vram - kept
    assert activation_room(controller.runs.values(), "4") is None  # not running now


def test_a_streaming_node_leaves_the_budget_less_its_resident_part_and_ring() -> None:
    controller, run, budget, sp = started(12, "4")  # the sampler streams Flux on a 12 GB card
    streamed = [cid for cid, p in sp.placements.items() if p.tier.gpu == "S"]
    assert streamed
    room = activation_room(controller.runs.values(), "4")
    assert room is not None and 0 < room < budget.vram - sum(
        c.rest for c in run.workload.components if c.id in streamed
    )


def test_no_room_without_a_running_plan() -> None:
    controller, _, budget = setup(12)
    assert activation_room(controller.runs.values(), "5") is None
    controller, run, budget, _ = started(12, "5")
    controller.node_finished("p1", "5")
    assert activation_room(controller.runs.values(), "5") is None
    run.plan.feasible = False
    controller.node_started("p1", "5")
    assert activation_room(controller.runs.values(), "5") is None
