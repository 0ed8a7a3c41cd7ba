"""The residency controller against a stand-in host: it applies the plan it logs, keeps the device
ledger under the budget, re-plans around cached and skipped nodes, and recovers from OOMs."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
from comfyui_headroom.memory.planning.reasons import step_reasons
from comfyui_headroom.memory.residency import Controller
from comfyui_headroom.memory.residency.run_log import Streamed
from comfyui_headroom.memory.units import GB, format_bytes
from headroom_testing.prompts import offload_t2i

HW = Hardware.pcie(4)
FILES = {
    "diffusion_model": "flux1-dev.safetensors",
    "text_encoder_1": "clip_l.safetensors",
    "text_encoder_2": "t5xxl_fp16.safetensors",
    "vae": "ae.safetensors",
}


class OOM(RuntimeError):
    pass


class FakeHost:
    """The host's accounting reduced to a set of loaded handles; sizes come from the plan's catalogue."""

    def __init__(self) -> None:
        self.loaded: dict[str, int] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail_next_load: type[BaseException] | None = None
        self.host: dict[str, str] = {}
        self.can_pin = True
        self.armed: dict[str, int] = {}  # component -> the weights budget it streams within
        self.sources: dict[str, tuple] = {}  # component -> (the plan's host tier, the bytes it pins)
        # what a streamed node's sampling does: streamed by Headroom, a host partial load, or nothing
        self.sampling = Streamed("streamed", 2**30, "streamed 40/57 blocks by Headroom, 1.00 GiB per step")
        self.refuse_stream = ""

    def on_gpu(self, handle: Any) -> int:
        return self.loaded.get(handle[0], 0)

    def fully_loaded(self, handle: Any) -> bool:
        return self.loaded.get(handle[0], 0) >= handle[1]

    def room_for(self, handle: Any) -> bool:
        return True

    def load(self, handle: Any) -> str:
        if self.fail_next_load is not None:
            exc, self.fail_next_load = self.fail_next_load, None
            raise exc("CUDA out of memory (injected)")
        self.calls.append(("load", handle[0]))
        self.loaded[handle[0]] = handle[1]
        return ""

    def host_part(self, handle: Any) -> str:
        return self.host.get(handle[0], "R")

    def evict(self, handle: Any) -> None:
        self.calls.append(("evict", handle[0]))
        self.loaded.pop(handle[0], None)

    def set_host_tier(self, handle: Any, host: str) -> str:
        if host == "P" and not self.can_pin:
            return "no CUDA device"
        self.host[handle[0]] = host
        return ""

    def warm(self, handle: Any) -> None:
        self.calls.append(("warm", handle[0]))

    def device_bytes(self) -> int:
        return sum(self.loaded.values())

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, OOM)

    def free_device(self) -> None:
        self.calls.append(("free", "*"))
        self.loaded.clear()

    def stream(self, handle: Any, budget: int, source: str = "P", pinned: int | None = None) -> str:
        if self.refuse_stream:
            return self.refuse_stream
        self.calls.append(("stream", handle[0]))
        self.sources[handle[0]] = (source, pinned)
        self.armed[handle[0]] = budget
        return ""

    def stream_ended(self, handle: Any) -> Streamed:
        if self.armed.pop(handle[0], None) is None:
            return Streamed("none", 0, "not streamed: the node did not sample it")
        self.calls.append(("unstream", handle[0]))
        return self.sampling


def prompt(seed: int = 1, **loader: str) -> dict[str, Any]:
    return offload_t2i(seed, **({"clip_type": "flux"} | FILES | loader))


def setup(card_gb: float = 48) -> tuple[Controller, FakeHost, Budget]:
    host = FakeHost()
    controller = Controller(host)
    budget = Budget.from_card(int(card_gb * GB), 64 * GB)
    return controller, host, budget


def register(controller: Controller, run_workload: Any) -> None:
    for c in run_workload.components:
        controller.register(c.id, c.label, (c.id, c.bytes))


def execute(controller: Controller, prompt_id: str, order: list[str], fail: str | None = None) -> None:
    for node_id in order:
        controller.node_started(prompt_id, node_id)
        controller.node_finished(prompt_id, node_id, ok=node_id != fail)
        if node_id == fail:
            return
    controller.prompt_finished(prompt_id)


def first_run(card_gb: float = 48) -> tuple[Controller, FakeHost, Budget]:
    controller, host, budget = setup(card_gb)
    run = controller.prompt_started("p1", prompt(), budget, HW)
    assert run is not None and run.plan.feasible
    register(controller, run.workload)
    controller.runs.clear()  # plan again now that the loader's components are registered
    run = controller.prompt_started("p1", prompt(), budget, HW)
    execute(controller, "p1", [sp.step.node_id for sp in run.plan.steps])
    return controller, host, budget


@pytest.mark.parametrize("card_gb", [48, 24, 12])
def test_the_controller_applies_exactly_what_it_planned_within_budget(card_gb: float) -> None:
    controller, host, budget = first_run(card_gb)
    summary = controller.summary("p1")
    assert summary is not None and summary["feasible"]
    assert summary["planned"], "a cold start loads something"
    assert summary["applied"] == summary["planned"]
    assert summary["over_budget"] == 0 and 0 < summary["ledger_peak"] <= budget.vram
    assert summary["replans"] == 0


def test_every_planned_move_carries_the_plans_reason() -> None:
    controller, _, budget = first_run(12)
    run = controller.runs["p1"]
    reasons = step_reasons(run.workload, run.plan)
    steps = [sp.step.node_id for sp in run.plan.steps]
    planned = [e for e in controller.log("p1") if e.kind == "planned"]
    assert planned and {e.action for e in planned} >= {"load", "stream", "evict"}
    for e in planned:
        assert e.detail == reasons[steps.index(e.node_id)][e.component], e
        assert e.detail.startswith(
            {"load": "on GPU", "prefetch": "on disk until prefetched", "stream": "streamed from"}.get(
                e.action, ("dropped", "in ", "on disk")
            )
        ), e
    # the route serves the summary: the reasons are in it
    assert any(e["kind"] == "planned" and e["detail"] for e in controller.summary("p1")["events"])
    streamed = next(e for e in planned if e.action == "stream")
    assert f"does not fit the {format_bytes(budget.vram, 'GiB')} budget" in streamed.detail


def test_a_small_card_evicts_the_text_encoder_before_the_sampler_and_streams_the_model() -> None:
    controller, host, budget = first_run(12)
    applied = controller.summary("p1")["applied"]
    assert ("4", "stream", "1:diffusion_model:diffusion_model") in applied
    assert ("4", "evict", "1:text_encoder_1:text_encoder") in applied  # clip_l + t5xxl, one CLIP


def test_a_second_prompt_is_planned_around_the_nodes_the_host_serves_from_cache() -> None:
    controller, host, budget = first_run(24)
    host.calls.clear()
    run = controller.prompt_started("p2", prompt(seed=2), budget, HW)
    assert run is not None
    assert [sp.step.node_id for sp in run.plan.steps] == ["4", "5", "6"]  # loader, encode, latent cached
    execute(controller, "p2", ["4", "5", "6"])
    summary = controller.summary("p2")
    assert summary["replans"] == 0 and summary["applied"] == summary["planned"]
    assert any("served from the host's cache" in e["detail"] for e in summary["events"])


def test_an_unpredicted_skip_replans_from_where_the_components_are() -> None:
    controller, host, budget = first_run(24)
    controller.held.clear()  # forget the cache: the plan expects every node to run again
    run = controller.prompt_started("p2", prompt(seed=2), budget, HW)
    assert [sp.step.node_id for sp in run.plan.steps][:2] != ["4", "5"]
    execute(controller, "p2", ["4", "5", "6"])  # the host served 1, 2, 3 from its cache after all
    summary = controller.summary("p2")
    assert summary["replans"] == 1
    assert summary["applied"] == summary["planned"]  # against the new plan
    assert summary["over_budget"] == 0


def test_an_oom_in_a_controller_load_frees_the_device_and_retries() -> None:
    controller, host, budget = setup(24)
    run = controller.prompt_started("p1", prompt(), budget, HW)
    register(controller, run.workload)
    controller.runs.clear()
    run = controller.prompt_started("p1", prompt(), budget, HW)
    host.fail_next_load = OOM
    execute(controller, "p1", [sp.step.node_id for sp in run.plan.steps])
    kinds = [e.kind for e in controller.log("p1")]
    assert "oom" in kinds and ("free", "*") in host.calls
    summary = controller.summary("p1")
    assert summary["applied"] == summary["planned"]


def test_after_a_failed_node_unloaded_everything_the_next_prompt_loads_again() -> None:
    controller, host, budget = first_run(48)
    run = controller.prompt_started("p2", prompt(seed=3), budget, HW)
    controller.node_started("p2", "4")
    host.loaded.clear()  # the host's OOM handler: unload_all_models()
    controller.node_finished("p2", "4", ok=False)
    assert any(e.kind == "failed" for e in controller.log("p2"))
    run = controller.prompt_started("p3", prompt(seed=3), budget, HW)
    assert all(not t.gpu for t in run.workload.initial.values())
    execute(controller, "p3", [sp.step.node_id for sp in run.plan.steps])
    summary = controller.summary("p3")
    assert ("4", "load", "1:diffusion_model:diffusion_model") in summary["applied"]
    assert summary["applied"] == summary["planned"]


def test_residency_choices_are_honoured_and_dropped_only_when_they_cannot_fit() -> None:
    controller, host, budget = setup(48)
    run = controller.prompt_started("p1", prompt(text_encoder_residency="disk"), budget, HW)
    te = "1:text_encoder_1:text_encoder"
    assert {sp.placements[te].tier.host for sp in run.plan.steps if te in sp.placements} == {"D"}
    small = Budget.from_card(12 * GB, 64 * GB)
    run = controller.prompt_started("p2", prompt(model_residency="gpu"), small, HW)
    assert run.plan.feasible  # flux-dev cannot stay whole on a 12 GB card: the choice gives way
    assert any("do not fit this budget" in e.detail for e in run.events)


def test_an_unplannable_prompt_leaves_the_host_in_charge() -> None:
    controller, host, budget = setup()
    assert controller.prompt_started("p1", {"a": 1}, budget, HW) is None
    controller.node_started("p1", "4")  # no run: nothing happens, nothing raises
    assert host.calls == []


def test_planning_past_the_time_limit_leaves_the_host_in_charge(caplog: pytest.LogCaptureFixture) -> None:
    """At a prompt's start the controller plans on the host's executor thread: bounded like the preflight."""
    host = FakeHost()
    controller = Controller(host, time_limit_s=0)
    budget = Budget.from_card(24 * GB, 64 * GB)
    with caplog.at_level(logging.INFO, logger="headroom"):
        assert controller.prompt_started("p1", prompt(), budget, HW) is None
    assert "took longer than its limit of 0 s" in caplog.text and not controller.runs
    assert Controller(host, time_limit_s=600).prompt_started("p1", prompt(), budget, HW) is not None


def test_an_oom_after_the_prompt_finished_is_not_recovered_with_its_plan() -> None:
    """A prompt the controller does not manage must not be "recovered" with the previous prompt's plan."""
    controller, host, budget = setup(24)
    run = controller.prompt_started("p1", prompt(), budget, HW)
    register(controller, run.workload)
    controller.runs.clear()
    run = controller.prompt_started("p1", prompt(), budget, HW)
    node = run.plan.steps[0].step.node_id
    controller.node_started("p1", node)
    controller.node_finished("p1", node, ok=False)
    controller.prompt_finished("p1")
    calls = list(host.calls)
    assert controller.recover("p1") is False and host.calls == calls


def test_components_registered_while_the_prompt_runs_join_the_plan() -> None:
    controller, host, budget = setup(24)
    run = controller.prompt_started("p1", prompt(), budget, HW)
    order = [sp.step.node_id for sp in run.plan.steps]
    assert order[0] == "1"  # the loader runs first and registers what it loaded
    controller.node_started("p1", "1")
    register(controller, run.workload)
    controller.node_finished("p1", "1")
    execute(controller, "p1", order[1:])
    summary = controller.summary("p1")
    assert summary["planned"] and summary["applied"] == summary["planned"]
    assert summary["over_budget"] == 0


def test_a_component_the_loader_put_on_the_gpu_is_not_evicted_and_loaded_straight_back() -> None:
    """#16: the host loads a small text encoder onto the GPU as it builds it. The plan made at the
    prompt's start had it on disk until its first use: it evicted it at EmptyLatentImage and prefetched
    it back in the same step. Planned again from where it is, it stays until its last use."""
    controller, host, budget = setup(24)
    run = controller.prompt_started("p1", prompt(), budget, HW)
    order = [sp.step.node_id for sp in run.plan.steps]
    assert order[:3] == ["1", "3", "2"]  # loader, EmptyLatentImage, CLIPTextEncode
    controller.node_started("p1", "1")
    register(controller, run.workload)
    encoder = next(c for c in run.workload.components if c.kind == "text_encoder")
    host.loaded[encoder.id] = encoder.bytes  # as ComfyUI's text_encoder_initial_device does
    controller.node_finished("p1", "1")
    execute(controller, "p1", order[1:])
    moves = [(e.kind, e.node_id, e.action) for e in controller.log("p1") if e.component == encoder.id]
    assert ("planned", "3", "evict") not in moves and ("planned", "3", "prefetch") not in moves
    assert [c for c in host.calls if c[1] == encoder.id] == [("evict", encoder.id)]  # after its use
    summary = controller.summary("p1")
    assert summary["applied"] == summary["planned"] and summary["over_budget"] == 0


def test_independent_nodes_the_host_runs_in_another_order_stay_in_the_plan() -> None:
    controller, host, budget = first_run(24)
    run = controller.prompt_started(
        "p2",
        prompt(seed=2) | {"9": {"class_type": "PreviewImage", "inputs": {"images": ["5", 0]}}},
        budget,
        HW,
    )
    order = [sp.step.node_id for sp in run.plan.steps]
    swapped = order[:-2] + order[-2:][::-1]  # the two output nodes, independent of each other
    execute(controller, "p2", swapped)
    summary = controller.summary("p2")
    assert summary["replans"] == 1  # once, when the host's order is seen; the other node is still planned
    assert summary["applied"] == summary["planned"]
    assert not any(e["detail"].startswith("not in the plan") for e in summary["events"])


def test_a_node_with_lazy_inputs_starting_first_keeps_their_branch_in_the_plan() -> None:
    """The host starts a node with lazy inputs before them, then runs what it asks for: the nodes behind
    a lazy input are still to come (not cached), so their moves stay planned and are applied."""
    controller, host, budget = first_run(24)
    controller.held.clear()  # every node runs again
    switch = {
        "9": {"class_type": "TestLazySwitch", "inputs": {"a": ["5", 0], "b": ["5", 0]}},
        "10": {"class_type": "PreviewImage", "inputs": {"images": ["9", 0]}},
    }
    graph = prompt(seed=2) | switch
    del graph["6"]  # the switch feeds the only output

    def lazy(class_type: str) -> frozenset[str]:
        return frozenset({"a", "b"}) if class_type == "TestLazySwitch" else frozenset()

    run = controller.prompt_started("p2", graph, budget, HW, lazy_inputs=lazy)
    order = [sp.step.node_id for sp in run.plan.steps]
    assert order[-2:] == ["9", "10"]
    execute(controller, "p2", ["9", *order[:-2], "9", "10"])  # the switch, its branch, the switch again
    summary = controller.summary("p2")
    unplanned = [e["node_id"] for e in summary["events"] if e["detail"].startswith("not in the plan")]
    assert unplanned == ["9"]  # only the switch's second start
    assert summary["applied"] == summary["planned"] and summary["over_budget"] == 0
    assert {"4"} <= {node for node, _, _ in summary["applied"]}  # the sampler's moves were applied

    controller.held.clear()
    run = controller.prompt_started("p3", graph, budget, HW)  # without the host's lazy inputs:
    execute(controller, "p3", ["9", *order[:-2], "9", "10"])
    unplanned = [
        e["node_id"] for e in controller.summary("p3")["events"] if e["detail"].startswith("not in the plan")
    ]
    assert "4" in unplanned  # the branch was taken for cached and ran unplanned


def test_a_host_copy_the_host_replaced_is_placed_again_and_an_impossible_one_is_not_retried() -> None:
    controller, host, budget = first_run(12)
    te = "1:text_encoder_1:text_encoder"
    run = controller.prompt_started("p2", prompt(seed=2, text_encoder_residency="disk"), budget, HW)
    host.host[te] = "R"  # the host unloaded it into fresh pageable memory behind our back
    execute(controller, "p2", [sp.step.node_id for sp in run.plan.steps])
    assert host.host[te] == "D"
    maps = [e for e in controller.log("p2") if e.action == "map" and e.component == te]
    assert maps and maps[0].kind == "applied"
    host.can_pin = False
    run = controller.prompt_started("p3", prompt(seed=3, text_encoder_residency="pinned_ram"), budget, HW)
    execute(controller, "p3", [sp.step.node_id for sp in run.plan.steps])
    pins = [e for e in controller.log("p3") if e.action == "pin" and e.component == te]
    assert [e.kind for e in pins] == ["skipped"] and "no CUDA" in pins[0].detail  # said once, not applied


def test_a_component_the_host_evicted_itself_is_loaded_again_for_its_node() -> None:
    controller, host, budget = first_run(48)
    run = controller.prompt_started("p2", prompt(seed=2), budget, HW)
    order = [sp.step.node_id for sp in run.plan.steps]
    dm = "1:diffusion_model:diffusion_model"
    controller.node_started("p2", order[0])
    host.loaded.pop(dm, None)  # the host made room for something of its own
    controller.node_finished("p2", order[0])
    execute(controller, "p2", order[1:])
    sampler = order.index(next(sp.step.node_id for sp in run.plan.steps if dm in sp.step.uses))
    loads = [
        order.index(e.node_id)
        for e in controller.log("p2")
        if e.kind == "applied" and e.action in ("load", "prefetch") and e.component == dm
    ]
    assert loads and loads[0] <= sampler  # back on the device by the time its sampler starts


# --- streaming at the node the plan streams a model at (#15) ---------------------------------------

DM = "1:diffusion_model:diffusion_model"


def streamed_run(card_gb: float = 12, **host: Any) -> tuple[Controller, FakeHost, Any]:
    controller, fake, budget = setup(card_gb)
    run = controller.prompt_started("p1", prompt(), budget, HW)
    register(controller, run.workload)
    controller.runs.clear()
    for name, value in host.items():
        setattr(fake, name, value)
    run = controller.prompt_started("p1", prompt(), budget, HW)
    execute(controller, "p1", [sp.step.node_id for sp in run.plan.steps])
    return controller, fake, run


def stream_events(controller: Controller) -> list[tuple[str, str, str]]:
    return [(e.kind, e.node_id, e.detail) for e in controller.log("p1") if e.action == "stream"]


def test_a_component_streamed_from_disk_is_mapped_before_it_is_armed() -> None:
    """The streamer streams in place from where the weights are: the plan's stream<-disk maps them first."""
    controller, fake, budget = setup(12)
    run = controller.prompt_started("p1", prompt(model_residency="disk"), budget, HW)
    register(controller, run.workload)
    controller.runs.clear()
    run = controller.prompt_started("p1", prompt(model_residency="disk"), budget, HW)
    sampler = next(sp for sp in run.plan.steps if sp.placements.get(DM) and sp.placements[DM].tier.gpu == "S")
    assert sampler.placements[DM].tier.host == "D"
    for sp in run.plan.steps:
        if sp is sampler:
            fake.host[DM] = "R"  # the host's own load (another workflow's) left a pageable copy
        controller.node_started("p1", sp.step.node_id)
        controller.node_finished("p1", sp.step.node_id)
    controller.prompt_finished("p1")
    moves = [
        (e.kind, e.action)
        for e in controller.log("p1")
        if e.component == DM and e.node_id == sampler.step.node_id
    ]
    assert moves.index(("applied", "map")) < moves.index(("armed", "stream")), moves
    assert fake.sources[DM] == ("D", None)


def test_a_streamed_step_arms_the_streamer_at_its_start_and_disarms_it_at_its_end() -> None:
    controller, host, run = streamed_run()
    sampler = next(sp for sp in run.plan.steps if sp.placements.get(DM) and sp.placements[DM].tier.gpu == "S")
    assert [c for c in host.calls if c[1] == DM and c[0] in ("stream", "unstream")] == [
        ("stream", DM),
        ("unstream", DM),
    ]
    assert not host.armed, "disarmed when the node finished"
    kinds = [(kind, node) for kind, node, _ in stream_events(controller)]
    assert kinds == [("planned", "4"), ("armed", "4"), ("applied", "4")]
    applied = next(e for e in controller.log("p1") if e.kind == "applied" and e.action == "stream")
    assert applied.detail == "streamed 40/57 blocks by Headroom, 1.00 GiB per step"
    assert applied.nbytes == 2**30
    # the budget: the card's, less the step's activations and the other components on the device
    armed = next(e for e in controller.log("p1") if e.kind == "armed")
    others = sum(
        run.workload.component(cid).bytes
        for cid, p in sampler.placements.items()
        if cid != DM and p.tier.gpu == "G"
    ) + sum(p.bytes for p in sampler.prefetched)
    assert armed.nbytes == run.plan.budget.vram - sampler.step.activation_min - others
    assert 0 < armed.nbytes < run.workload.component(DM).bytes
    # it streams from the plan's host tier: a pinned copy of as many bytes as the plan pins, else in place
    placement = sampler.placements[DM]
    assert host.sources[DM] == (
        placement.tier.host,
        placement.pinned_bytes if placement.tier.host == "P" else None,
    )
    said = {
        "P": "a pinned copy of its streamed blocks",
        "R": "its own RAM, no copy",
        "D": "its file's pages, no copy",
    }
    assert armed.detail.endswith(f"from {said[placement.tier.host]}")
    summary = controller.summary("p1")
    assert ("4", "stream", DM) in summary["applied"] and summary["applied"] == summary["planned"]


@pytest.mark.parametrize(
    ("sampling", "refuse", "detail"),
    [
        (Streamed("partial", 5 * 2**30, "host partial load: 5.00 GiB of 22.2 GiB"), "", "host partial load"),
        (Streamed("none", 0, "not streamed: everything fits the budget: nothing streamed"), "", "not stre"),
        (None, "text-encoder streaming comes with the Stream CLIP node", "not streamed: text-encoder"),
    ],
)
def test_a_stream_that_did_not_happen_is_never_logged_as_applied(
    sampling: Streamed | None, refuse: str, detail: str
) -> None:
    host_settings: dict[str, Any] = {"refuse_stream": refuse}
    if sampling is not None:
        host_settings["sampling"] = sampling
    controller, host, run = streamed_run(**host_settings)
    events = stream_events(controller)
    assert not any(kind == "applied" for kind, _, _ in events), events
    end = [(kind, d) for kind, node, d in events if node == "4" and kind not in ("planned", "armed", "note")]
    assert len(end) == 1 and end[0][0] == "skipped" and end[0][1].startswith(detail), events
    if refuse:
        assert ("note", "4", f"not armed: {refuse}") in events and not host.armed
    summary = controller.summary("p1")
    assert ("4", "stream", DM) not in summary["applied"] and ("4", "stream", DM) in summary["planned"]
    details = [e["detail"] for e in summary["events"]]
    assert not any("applied" in d or "the sampler streams it" in d for d in details)


def test_a_node_that_never_finishes_is_disarmed_when_its_prompt_ends() -> None:
    controller, host, budget = setup(12)
    run = controller.prompt_started("p1", prompt(), budget, HW)
    register(controller, run.workload)
    controller.runs.clear()
    run = controller.prompt_started("p1", prompt(), budget, HW)
    order = [sp.step.node_id for sp in run.plan.steps]
    for node_id in order[: order.index("4")]:
        controller.node_started("p1", node_id)
        controller.node_finished("p1", node_id)
    controller.node_started("p1", "4")
    assert host.armed
    controller.prompt_finished("p1")  # current hosts report no finish for a node that raised
    assert not host.armed and ("unstream", DM) in host.calls
