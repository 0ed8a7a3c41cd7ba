"""Prefetch on a side stream, the policy (``memory/residency/prefetch.py``): an upload starts only within
the plan's reservation and where the host can account for it, lands at the node it is for, and is
cancelled by a deviation, a failure, an OOM or the prompt's end; the controller falls back to its
synchronous load otherwise."""

from __future__ import annotations

import time
from typing import Any

from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
from comfyui_headroom.memory.planning.planner import Plan, plan
from comfyui_headroom.memory.planning.workload import Component, Step, Workload
from comfyui_headroom.memory.residency import Controller, Run
from comfyui_headroom.memory.residency.prefetch import Prefetcher, fits, reservation

GB = 2**30


class OOM(RuntimeError):
    pass


class FakeEvent:
    def __init__(self) -> None:
        self.fired = False
        self.waited = 0

    def query(self) -> bool:
        return self.fired

    def wait(self) -> None:
        self.waited += 1
        self.fired = True


class FakeUpload:
    def __init__(self, nbytes: int) -> None:
        self.event = FakeEvent()
        self.nbytes = nbytes


class FakeOps:
    """The host part: what it was asked, in order; ``loaded`` is the host's accounting."""

    def __init__(self, size: int = 3 * GB) -> None:
        self.sizes: dict[str, int] = {}
        self.default = size
        self.why = ""
        self.calls: list[tuple[str, str]] = []
        self.loaded: set[str] = set()
        self.uploads: dict[str, FakeUpload] = {}
        self.fail_start: BaseException | None = None
        self.fail_land: BaseException | None = None

    def why_sync(self, handle: Any) -> str:
        return self.why

    def size(self, handle: Any) -> int:
        return self.sizes.get(handle, self.default)

    def start(self, handle: Any) -> FakeUpload:
        if self.fail_start is not None:
            raise self.fail_start
        self.calls.append(("start", handle))
        self.uploads[handle] = FakeUpload(self.size(handle))
        return self.uploads[handle]

    def land(self, handle: Any, upload: FakeUpload) -> None:
        if self.fail_land is not None:
            raise self.fail_land
        assert upload.event.fired, "landed before the copies did"
        self.calls.append(("land", handle))
        self.loaded.add(handle)

    def cancel(self, upload: FakeUpload) -> None:
        upload.event.wait()
        self.calls.append(("cancel", next(h for h, u in self.uploads.items() if u is upload)))

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, OOM)


def two_nodes(card_gb: int = 24) -> tuple[Workload, Plan]:
    w = Workload(
        (Component("a", "A", 2 * GB), Component("b", "B", 3 * GB)),
        (Step("1", "one", ("a",), compute_s=1.0), Step("2", "two", ("b",), compute_s=1.0)),
    )
    return w, plan(w, Budget.from_card(card_gb * GB, 64 * GB), Hardware.pcie(4))


def test_the_plan_reserves_the_next_component_during_the_first_node() -> None:
    _, p = two_nodes()
    assert reservation(p.steps[0], "b") == (3 * GB, "2")
    assert reservation(p.steps[0], "a") == (0, "")
    assert reservation(p.steps[1], "b") == (0, "")
    assert fits(3 * GB, 3 * GB) and not fits(4 * GB, 3 * GB) and not fits(0, 3 * GB)


def test_an_upload_starts_only_within_the_reservation_and_where_the_host_can_account_for_it() -> None:
    _, p = two_nodes()
    ops = FakeOps()
    pf = Prefetcher(ops)
    ops.why = "no CUDA side stream"
    started, note = pf.begin("p", p.steps[0], "b", "B", "b")
    assert (
        not started
        and note[1:3] == ("note", "prefetch")
        and note[-1] == "stays synchronous: no CUDA side stream"
    )
    ops.why, ops.sizes["b"] = "", 4 * GB  # bigger than the plan reserved: never take the node's memory
    started, note = pf.begin("p", p.steps[0], "b", "B", "b")
    assert not started and "the plan reserved 3072.0 MiB" in note[-1]
    started, note = pf.begin("p", p.steps[1], "b", "B", "b")  # nothing reserved there
    assert not started and not ops.calls
    ops.sizes["b"] = 3 * GB
    ops.fail_start = OOM("CUDA out of memory")
    started, note = pf.begin("p", p.steps[0], "b", "B", "b")
    assert not started and note[1:3] == ("oom", "prefetch") and not pf.inflight
    ops.fail_start = None
    started, note = pf.begin("p", p.steps[0], "b", "B", "b")
    assert started and note[0] == "1" and "for node 2" in note[-1] and ops.calls == [("start", "b")]
    assert pf.begin("p", p.steps[0], "b", "B", "b")[0] and ops.calls == [("start", "b")]  # one upload


def test_it_lands_at_the_node_it_is_for_and_only_then() -> None:
    _, p = two_nodes()
    ops = FakeOps()
    pf = Prefetcher(ops)
    pf.begin("p", p.steps[0], "b", "B", "b")
    assert pf.boundary("p", "1", "end") == [] and not ops.loaded  # the copies have not landed yet
    notes = pf.boundary("p", "2", "start")
    assert ops.uploads["b"].event.waited == 1 and ops.loaded == {"b"}
    assert [n[:4] for n in notes] == [("1", "applied", "prefetch", "b")]  # logged at the node it overlapped
    assert not pf.inflight


def test_a_node_the_plan_does_not_know_leaves_the_upload_in_flight() -> None:
    _, p = two_nodes()
    ops = FakeOps()
    pf = Prefetcher(ops)
    pf.begin("p", p.steps[0], "b", "B", "b")
    assert pf.boundary("p", "helper", "start", planned=False) == [] and "b" in pf.inflight
    assert [n[1] for n in pf.boundary("p", "2", "start")] == ["applied"]


def test_landed_copies_enter_the_accounting_when_the_node_ends() -> None:
    _, p = two_nodes()
    ops = FakeOps()
    pf = Prefetcher(ops)
    pf.begin("p", p.steps[0], "b", "B", "b")
    ops.uploads["b"].event.fired = True
    assert [n[1] for n in pf.boundary("p", "1", "end")] == ["applied"]
    assert ops.loaded == {"b"} and ops.uploads["b"].event.waited == 0 and pf.boundary("p", "2", "start") == []


def test_a_deviation_a_failure_an_oom_or_the_prompts_end_cancel_it() -> None:
    _, p = two_nodes()
    for phase, node, why in [
        ("start", "9", "node 9 started, not node 2"),
        ("failed", "1", "the node failed"),
        ("oom", "1", "out of memory"),
        ("closed", "", "the prompt ended"),
    ]:
        ops = FakeOps()
        pf = Prefetcher(ops)
        pf.begin("p", p.steps[0], "b", "B", "b")
        notes = pf.boundary("p", node, phase)
        assert [n[1:4] for n in notes] == [("skipped", "prefetch", "b")] and notes[0][
            -1
        ] == f"cancelled: {why}"
        assert ops.calls == [("start", "b"), ("cancel", "b")] and not ops.loaded and not pf.inflight
    ops = FakeOps()
    pf = Prefetcher(ops)
    pf.begin("p", p.steps[0], "b", "B", "b")
    assert "another prompt" in pf.boundary("q", "1", "start")[0][-1]


def test_a_landing_that_fails_is_cancelled_and_logged() -> None:
    _, p = two_nodes()
    ops = FakeOps()
    pf = Prefetcher(ops)
    pf.begin("p", p.steps[0], "b", "B", "b")
    ops.fail_land = OOM("CUDA out of memory")
    notes = pf.boundary("p", "2", "start")
    assert [n[1] for n in notes] == ["oom"] and ops.calls[-1] == ("cancel", "b") and not ops.loaded


class FakeHost:
    """HostOps over ``FakeOps.loaded`` (the side stream's landings count as the host's loads)."""

    def __init__(self, ops: FakeOps) -> None:
        self.ops = ops
        self.loads: list[str] = []

    def on_gpu(self, h: Any) -> int:
        return GB if h in self.ops.loaded else 0

    def fully_loaded(self, h: Any) -> bool:
        return h in self.ops.loaded

    def room_for(self, h: Any) -> bool:
        return True

    def load(self, h: Any) -> str:
        self.loads.append(h)
        self.ops.loaded.add(h)
        return ""

    def evict(self, h: Any) -> None:
        self.ops.loaded.discard(h)

    def host_part(self, h: Any) -> str:
        return "R"

    def set_host_tier(self, h: Any, host: str) -> str:
        return "not here"

    def warm(self, h: Any) -> None:
        pass

    def device_bytes(self) -> int:
        return GB * len(self.ops.loaded)

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, OOM)

    def free_device(self) -> None:
        self.ops.loaded.clear()


def controller(why: str = "") -> tuple[Controller, FakeOps, FakeHost]:
    w, p = two_nodes()
    ops = FakeOps()
    ops.why = why
    host = FakeHost(ops)
    c = Controller(host)
    c.prefetcher = Prefetcher(ops)
    for comp in w.components:
        c.register(comp.id, comp.label, comp.id)
    c.runs["p"] = Run("p", w, p, time.monotonic())
    return c, ops, host


def test_the_controller_uploads_on_the_side_stream_and_the_next_node_loads_nothing() -> None:
    c, ops, host = controller()
    c.node_started("p", "1")
    assert host.loads == ["a"] and ops.calls == [("start", "b")] and "b" not in ops.loaded
    c.node_finished("p", "1")
    c.node_started("p", "2")
    assert host.loads == ["a"] and ops.calls[-1] == ("land", "b")  # landed, not loaded again
    c.node_finished("p", "2")
    c.prompt_finished("p")
    s = c.summary("p")
    assert s is not None and ("1", "prefetch", "b") in s["planned"] and ("1", "prefetch", "b") in s["applied"]


def test_the_controller_loads_synchronously_where_the_host_cannot_account_for_it() -> None:
    c, ops, host = controller(why="this host keeps no LoadedModel list")
    c.node_started("p", "1")
    assert host.loads == ["a", "b"] and not ops.calls
    lines = [e.detail for e in c.log("p") if e.kind == "note" and e.action == "prefetch"]
    assert lines == ["stays synchronous: this host keeps no LoadedModel list"]


def test_an_oom_recovery_cancels_the_upload_before_freeing_the_device() -> None:
    c, ops, host = controller()
    c.node_started("p", "1")
    assert c.recover("p")
    assert ("cancel", "b") in ops.calls
    cancelled = [e for e in c.log("p") if e.kind == "skipped" and e.action == "prefetch"]
    assert cancelled and cancelled[0].detail == "cancelled: out of memory"
