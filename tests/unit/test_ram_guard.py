"""The RAM guard against a stand-in process: the order it sends idle components to disk in, its one-line
reasons, the per-node prediction (RssAnon, pinned, mapped pages) and ledger, the release after a prompt,
and the controller calling it at every planned node boundary."""

from __future__ import annotations

from typing import Any

import pytest

from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
from comfyui_headroom.memory.planning.planner import plan
from comfyui_headroom.memory.planning.workload import Component, Step, Workload
from comfyui_headroom.memory.residency import Controller
from comfyui_headroom.memory.residency.ram_budget import RamBudget, RamReading
from comfyui_headroom.memory.residency.ram_guard import (
    Held,
    RamGuard,
    choose,
    next_use,
    predict,
    to_disk_order,
)
from comfyui_headroom.memory.units import GB, GiB
from headroom_testing.prompts import offload_t2i

HW = Hardware.pcie(4)
HIGH, CLIP, LOW = (
    "1:diffusion_model:diffusion_model",
    "1:text_encoder_1:text_encoder",
    "2:diffusion_model:diffusion_model",
)
LOADER = "HeadroomOffloadLoader"


def wan22(pin: dict[str, str] | None = None) -> Workload:
    """Wan 2.2's shape: loader 1 (high-noise expert + encoder), loader 2 (low-noise expert), encode,
    the two experts' samplers, save."""
    pin = pin or {}
    components = (
        Component(HIGH, "high", 10 * GiB, pin=pin.get(HIGH, "")),
        Component(CLIP, "clip", 6 * GiB, pin=pin.get(CLIP, "")),
        Component(LOW, "low", 10 * GiB, pin=pin.get(LOW, "")),
    )
    steps = (
        Step("1", LOADER), Step("2", LOADER), Step("4", "CLIPTextEncode", (CLIP,), activation=GiB // 4),
        Step("7", "KSamplerAdvanced", (HIGH,), 10, activation=2 * GiB),
        Step("8", "KSamplerAdvanced", (LOW,), 10, activation=2 * GiB), Step("9", "SaveLatent"),
    )  # fmt: skip
    return Workload(components, steps)


def planned(workload: Workload, ram: int = 64 * GiB) -> Any:
    result = plan(workload, Budget(vram=24 * GiB, ram=ram, pinned=ram), HW)
    assert result.feasible
    return result


def budget(ram: float, pinned: float | None = None) -> RamBudget:
    return RamBudget(int(ram * GiB), int((ram if pinned is None else pinned) * GiB), "setting", "")


def test_never_needed_again_goes_first_then_the_farthest_then_the_larger() -> None:
    held = [Held("a", "", 1, 0, 1), Held("b", "", 5, 0, 3), Held("c", "", 2, 0, None), Held("d", "", 9, 0, 3)]
    assert [h.component_id for h in to_disk_order(held)] == ["c", "d", "b", "a"]
    assert [h.component_id for h in choose(held, over=10)] == ["c", "d"]
    assert [h.component_id for h in choose(held, over=0)] == []
    assert [h.component_id for h in choose(held, over=100)] == ["c", "d", "b", "a"]  # all, when not enough


def test_an_over_pinned_cap_moves_pinned_copies_only() -> None:
    held = [Held("r", "", 8, 0, None), Held("p", "", 0, 3, 2)]
    assert [h.component_id for h in choose(held, over=0, over_pinned=1)] == ["p"]


def test_next_use_counts_nodes_ahead() -> None:
    steps = planned(wan22()).steps
    assert (
        next_use(steps, 1, HIGH) == 2 and next_use(steps, 1, CLIP) == 1 and next_use(steps, 3, CLIP) is None
    )


def test_with_room_the_prediction_is_the_baseline_and_every_copy_the_host_keeps() -> None:
    w = wan22()
    needs = predict(w, planned(w).steps, 2 * GiB, budget(100), cpu=False)
    # on the GPU a computing component keeps no host copy; after its last use the host's unload makes one
    assert [n.anon // GiB for n in needs] == [2 + 16, 2 + 26, 2 + 20, 2 + 16, 2 + 16, 2 + 26]
    assert needs[1].brings == 10 * GiB and needs[0].brings == 16 * GiB
    assert all(n.pinned == 0 and n.mapped == 0 for n in needs)


def test_a_short_budget_sends_the_component_needed_farthest_ahead_to_disk() -> None:
    w = wan22()
    needs = predict(w, planned(w).steps, 2 * GiB, budget(20), cpu=False)
    # before loader 2 brings 10 GiB, 18 GiB are held: the high expert (needed in 2 nodes) goes, not the
    # encoder (needed next)
    assert needs[1].anon == (2 + 6 + 10) * GiB
    assert all(n.total <= 20 * GiB for n in needs)


def test_on_a_cpu_the_computing_component_is_ram_or_mapped_pages() -> None:
    w = wan22()
    needs = predict(w, planned(w).steps, 2 * GiB, budget(20), cpu=True)
    sampler_high = needs[3]  # the high expert went to disk before loader 2: it computes from its file
    assert sampler_high.mapped == 10 * GiB and sampler_high.brings == 2 * GiB
    assert needs[2].mapped == 0  # the encoder stayed in RAM


def test_the_users_ram_choice_is_never_overridden() -> None:
    w = wan22({HIGH: "ram", CLIP: "ram"})
    needs = predict(w, planned(w).steps, 2 * GiB, budget(20), cpu=False)
    # before loader 2, nothing may move; at its end the low expert it built is the one idle copy to go
    assert needs[1].anon == (2 + 16) * GiB


class Process:
    """The process as the guard sees it: a baseline, each component's CPU copy, freed heap not returned."""

    def __init__(self, baseline: float = 2, cpu: bool = False) -> None:
        self.baseline, self.cpu, self.garbage = int(baseline * GiB), cpu, 0
        self.copies: dict[str, tuple[int, int]] = {}
        self.moves: list[str] = []
        self.trims = 0
        self.refuse: set[str] = set()
        self.fail: set[str] = set()

    def read(self) -> RamReading:
        return RamReading(self.baseline + self.garbage + sum(p for p, _ in self.copies.values()),
                          sum(p for _, p in self.copies.values()), "RssAnon")  # fmt: skip

    def host_bytes(self, handle: Any) -> tuple[int, int]:
        return self.copies.get(handle, (0, 0))

    def to_disk(self, handle: Any) -> str:
        if handle in self.fail:
            raise OSError("cannot map")
        if handle in self.refuse:
            return "10.0 MiB stay in RAM (the loader converted them)"
        self.moves.append(handle)
        self.copies[handle] = (0, 0)
        return ""

    def trim(self) -> bool:
        self.trims += 1
        self.garbage = 0
        return True

    def computes_on_cpu(self) -> bool:
        return self.cpu


def managed(*ids: str) -> list[tuple[str, str, str]]:
    labels = {HIGH: "high", CLIP: "clip", LOW: "low"}
    return [(cid, labels[cid], cid) for cid in ids]


def guard_at(ram: float, process: Process) -> tuple[RamGuard, Workload, Any]:
    w = wan22()
    return RamGuard(process, lambda: budget(ram)), w, planned(w)


def test_before_a_loader_the_guard_makes_room_for_what_it_brings() -> None:
    process = Process()
    process.copies = {HIGH: (10 * GiB, 0), CLIP: (6 * GiB, 0)}
    guard, w, p = guard_at(20, process)
    guard.begin("p", [HIGH, CLIP])
    notes = guard.boundary("p", w, p, 1, "start", managed(HIGH, CLIP))
    assert process.moves == [HIGH]
    (kind, action, cid, _, nbytes, detail), *_ = notes
    assert (kind, action, cid, nbytes) == ("applied", "map", HIGH, 10 * GiB)
    assert detail == (
        "on disk: RAM budget 20 GiB leaves 8.0 GiB after what node 2 (HeadroomOffloadLoader) brings; "
        "needed again in 2 nodes"
    )
    assert process.read().total + 10 * GiB <= 20 * GiB


def test_freed_heap_goes_back_before_any_component_moves() -> None:
    process = Process()
    process.copies, process.garbage = {HIGH: (10 * GiB, 0)}, 13 * GiB
    guard, w, p = guard_at(24, process)
    assert guard.boundary("p", w, p, 3, "start", managed(HIGH)) == []
    assert process.trims == 1 and process.moves == []


def test_the_computing_component_is_never_moved_and_the_log_says_what_is_left() -> None:
    process = Process()
    process.copies = {HIGH: (10 * GiB, 0), CLIP: (6 * GiB, 0)}
    guard, w, p = guard_at(8, process)
    notes = guard.boundary("p", w, p, 3, "start", managed(HIGH, CLIP))  # the high expert computes
    assert process.moves == [CLIP]
    assert "not needed again in this prompt" in notes[0][5] and "after high" in notes[0][5]
    assert notes[-1][0] == "note" and "nothing idle is left" in notes[-1][5]


def test_a_pinned_copy_over_the_pinned_cap_is_moved() -> None:
    process = Process()
    process.copies = {HIGH: (0, 10 * GiB), CLIP: (6 * GiB, 0)}
    w = wan22()
    guard = RamGuard(process, lambda: budget(40, pinned=4))
    guard.boundary("p", w, planned(w), 2, "start", managed(HIGH, CLIP))
    assert process.moves == [HIGH]


def test_a_move_that_fails_or_frees_nothing_is_logged_and_not_retried() -> None:
    process = Process()
    process.copies = {HIGH: (10 * GiB, 0), CLIP: (6 * GiB, 0)}
    process.fail, process.refuse = {HIGH}, {CLIP}
    guard, w, p = guard_at(4, process)
    notes = guard.boundary("p", w, p, 5, "end", managed(HIGH, CLIP))
    kinds = {(n[0], n[2]) for n in notes}
    assert {("failed", HIGH), ("skipped", CLIP)} <= kinds
    assert any("converted" in n[5] for n in notes if n[2] == CLIP)
    again = guard.boundary("p", w, p, 5, "end", managed(HIGH, CLIP))
    assert not [n for n in again if n[1] == "map"]


def test_each_node_end_records_prediction_against_the_os() -> None:
    process = Process(baseline=2)
    guard, w, p = guard_at(40, process)
    guard.begin("p", [])
    process.copies = {HIGH: (10 * GiB, 0), CLIP: (6 * GiB, 0)}  # what loader 1 built
    (kind, _, _, _, nbytes, detail), *_ = guard.boundary("p", w, p, 0, "end", managed(HIGH, CLIP))
    assert kind == "ram" and nbytes == 18 * GiB
    assert detail.startswith("RssAnon 18 GiB (predicted 18 GiB), pinned 0 MiB (predicted 0 MiB)")
    (record,) = guard.records("p")
    assert record["predicted_anon"] == record["anon"] == 18 * GiB and record["budget"] == 40 * GiB


def test_after_the_last_node_every_idle_copy_but_the_users_choice_goes_to_disk() -> None:
    process = Process()
    process.copies = {HIGH: (10 * GiB, 0), CLIP: (6 * GiB, 0), LOW: (10 * GiB, 0)}
    w = wan22({CLIP: "pinned_ram"})
    guard = RamGuard(process, lambda: budget(64))
    notes = guard.boundary("p", w, planned(w), 5, "done", managed(HIGH, CLIP, LOW))
    assert sorted(process.moves) == sorted([HIGH, LOW])
    assert all("the prompt is done" in n[5] for n in notes if n[1] == "map")
    assert notes[-1][0] == "ram" and notes[-1][5].startswith("after the prompt: RssAnon 8.0 GiB, baseline")


def test_after_the_last_node_only_what_the_baseline_needs_goes_to_disk() -> None:
    process = Process(baseline=2)
    process.copies = {CLIP: (6 * GiB, 0)}  # another workflow's copy: part of this prompt's baseline
    w = wan22()
    guard = RamGuard(process, lambda: budget(64))
    guard.begin("p", [])
    process.copies.update({HIGH: (10 * GiB, 0), LOW: (10 * GiB, 0)})
    notes = guard.boundary("p", w, planned(w), 5, "done", managed(HIGH, CLIP, LOW))
    # the copy the same workflow needs last goes first (the low expert), then the high one: back to the
    # baseline, and the encoder (needed first next time) is not read from its file for nothing
    assert process.moves == [LOW, HIGH]
    after = guard.summary("p")["after"]
    assert (after["moves"], after["idle"], after["moved"], after["kept"]) == (2, 3, 20 * GiB, 6 * GiB)
    assert after["anon"] == after["baseline"] == 8 * GiB and after["seconds"] >= 0
    assert "2 of 3 idle copies to disk (20 GiB)" in notes[-1][5] and "6.0 GiB stay in RAM" in notes[-1][5]


def test_after_the_last_node_nothing_moves_when_freed_heap_was_the_excess() -> None:
    process = Process(baseline=2)
    w = wan22()
    guard = RamGuard(process, lambda: budget(64))
    process.copies = {HIGH: (10 * GiB, 0)}
    guard.begin("p", [])  # the copy was there at the start (another workflow's): the baseline holds it
    process.garbage = 3 * GiB  # freed during the prompt, not yet returned
    guard.boundary("p", w, planned(w), 5, "done", managed(HIGH))
    assert process.moves == [] and guard.summary("p")["after"]["kept"] == 10 * GiB


def test_the_summary_has_the_budget_each_nodes_figures_and_what_the_guard_did_there() -> None:
    process = Process()
    process.copies = {HIGH: (10 * GiB, 0), CLIP: (6 * GiB, 0)}
    guard, w, p = guard_at(20, process)
    guard.begin("p", [HIGH, CLIP])
    guard.boundary("p", w, p, 1, "start", managed(HIGH, CLIP))  # makes room for loader 2's expert
    process.copies[LOW] = (10 * GiB, 0)
    guard.boundary("p", w, p, 1, "end", managed(HIGH, CLIP, LOW))
    summary = guard.summary("p")
    assert (
        summary["budget"]["ram"] == 20 * GiB and summary["baseline"] == 2 * GiB and summary["after"] is None
    )
    (record,) = summary["nodes"]
    assert (record["node"], record["class_type"], record["phase"]) == ("2", LOADER, "end")
    assert record["anon"] == 18 * GiB and record["over"] is False and record["pinned_budget"] == 20 * GiB
    assert [(a["kind"], a["action"], a["component"]) for a in record["actions"]] == [("applied", "map", HIGH)]
    assert record["actions"][0]["detail"].startswith("on disk: RAM budget 20 GiB")
    assert guard.summary("another") is None


# -- the controller calls the guard


class Host:
    """The host's accounting for the controller: loaded handles only (the guard has its own Process)."""

    def __init__(self) -> None:
        self.loaded: set[Any] = set()

    def on_gpu(self, h: Any) -> int:
        return GiB if h in self.loaded else 0

    def fully_loaded(self, h: Any) -> bool:
        return h in self.loaded

    def room_for(self, h: Any) -> bool:
        return True

    def load(self, h: Any) -> str:
        self.loaded.add(h)
        return ""

    def evict(self, h: Any) -> None:
        self.loaded.discard(h)

    def host_part(self, h: Any) -> str:
        return "R"

    def set_host_tier(self, h: Any, host: str) -> str:
        return ""

    def warm(self, h: Any) -> None:
        pass

    def device_bytes(self) -> int:
        return GiB * len(self.loaded)

    def is_oom(self, exc: BaseException) -> bool:
        return False

    def free_device(self) -> None:
        self.loaded.clear()


FLUX = {"diffusion_model": "flux1-dev.safetensors", "text_encoder_1": "clip_l.safetensors",
        "text_encoder_2": "t5xxl_fp16.safetensors", "vae": "ae.safetensors", "clip_type": "flux"}  # fmt: skip


@pytest.mark.parametrize("broken", [False, True])
def test_the_controller_calls_the_guard_at_every_planned_boundary(broken: bool) -> None:
    process = Process(baseline=3)
    controller = Controller(Host())
    guard = RamGuard(process, lambda: budget(28))
    controller.ram_guard = guard
    card = Budget.from_card(int(48 * GB), 64 * GiB)
    run = controller.prompt_started("p", offload_t2i(1, **FLUX), card, HW)
    assert run is not None and run.plan.feasible
    for c in run.workload.components:
        controller.register(c.id, c.label, c.id)
    if broken:
        guard.boundary = lambda *args: 1 / 0  # type: ignore[method-assign]
    order = [sp.step.node_id for sp in run.plan.steps]
    for node_id in order:
        controller.node_started("p", node_id)
        if node_id == "1":  # the loader built every component in RAM
            process.copies = {c.id: (c.bytes, 0) for c in run.workload.components}
        controller.node_finished("p", node_id)
    log = controller.log("p")
    if broken:  # fails open: logged at every boundary, the prompt goes on
        assert sum(e.kind == "failed" and "RAM guard" in e.detail for e in log) == 2 * len(order)
        return
    assert [e.node_id for e in log if e.kind == "ram" and not e.detail.startswith("after")] == order
    assert [e for e in log if e.kind == "applied" and e.action == "map"], "the budget forced moves"
    assert process.read().total == 3 * GiB  # after the prompt: the baseline


@pytest.mark.parametrize("host", ["R", "P", "D"])
def test_a_streamed_component_holds_its_whole_host_copy_where_the_plan_puts_it(host: str) -> None:
    """The streamer keeps the host copy of what it puts on the device (the rest, the resident blocks) and
    the streamed blocks stay in the plan's host tier: from RAM, the whole component is in RAM while it
    streams; from pinned RAM, its streamed blocks are pinned and the rest of its copy pageable; from
    disk, RAM holds none of it and its streamed blocks are file pages."""
    from dataclasses import replace

    from comfyui_headroom.memory.planning.costmodel import Tier

    w = wan22()
    steps = list(planned(w).steps)
    s = 3  # the high expert's sampler
    c = w.components[0]
    streamed = 6 * GiB
    fast = streamed if host == "P" else 0
    placement = steps[s].placements[HIGH]
    tier = {"P": Tier.STREAM_PINNED, "R": Tier.STREAM_RAM, "D": Tier.STREAM_DISK}[host]
    placement = replace(placement, tier=tier, streamed_bytes=streamed, pinned_bytes=fast,
                        pageable_bytes=c.bytes - fast if host in "PR" else 0)  # fmt: skip
    steps[s] = replace(steps[s], placements={**steps[s].placements, HIGH: placement})
    before = predict(w, planned(w).steps, 2 * GiB, budget(100), cpu=False)[s]
    need = predict(w, steps, 2 * GiB, budget(100), cpu=False)[s]
    others = before.anon - 2 * GiB  # the idle components' copies, as without streaming
    assert need.anon - 2 * GiB - others == (c.bytes - fast if host in "PR" else 0)
    assert need.pinned == fast
    assert need.mapped == (streamed if host == "D" else 0)
