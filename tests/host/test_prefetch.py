"""Prefetch on a side stream with the host's own model management (``nodes/host/prefetch.py``): the
upload starts at the first node's start, before it computes; the host's accounting changes only when
the copies land; the next node's ``load_models_gpu`` then moves nothing (its weight patch applied); a
deviation, an OOM or an interrupt cancels the upload, frees its copies and leaves the accounting as it
was; a host without a side stream loads synchronously and says why.

The device stream is a fake on the CPU: the "upload" copies into other CPU tensors when the test fires
its event (or when the host waits on it), as a CUDA side stream would before its event completes.
"""

from __future__ import annotations

import gc
import time
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch

from headroom_testing.harness import Host
from headroom_testing.tiny_stock import build_tiny_sd15_unet

pytestmark = pytest.mark.host

GB = 2**30
PATCHED = "diffusion_model.out.2.weight"  # the patch the host applies when it loads (a LoRA-like diff)


class FakeEvent:
    def __init__(self, pairs: list[tuple[torch.Tensor, torch.Tensor]], log: list[str]) -> None:
        self.pairs, self.log, self.fired = pairs, log, False

    def fire(self) -> None:
        if not self.fired:
            for dst, src in self.pairs:
                dst.copy_(src)
            self.fired = True
            self.pairs = []
            self.log.append("copies landed")

    def query(self) -> bool:
        return self.fired

    def wait(self) -> None:
        self.fire()


class FakeStream:
    """The side stream: remembers (weakly) the device copies it was given, to check they are freed."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.events: list[FakeEvent] = []
        self.copies: list[weakref.ref] = []

    def copy(self, pairs: Any) -> FakeEvent:
        self.log.append("upload started")
        self.copies += [weakref.ref(dst) for dst, _ in pairs]
        self.events.append(FakeEvent(list(pairs), self.log))
        return self.events[-1]


class Handle:
    def __init__(self, patcher: Any) -> None:
        self.patcher, self.module = patcher, patcher.model
        self.files, self.mapped_names, self.residency = None, {}, "auto"

    def live_clones(self) -> list[Any]:
        return []


@pytest.fixture(scope="module")
def files(host: Host, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("prefetch")
    return {
        n: build_tiny_sd15_unet(d, f"{n}.safetensors", seed, torch.float32)
        for n, seed in (("a", 1), ("b", 2))
    }


class Setup:
    def __init__(self, host: Host, files: dict[str, Path], stream: FakeStream | None) -> None:
        mm = self.mm = host.model_management
        mm.unload_all_models()
        load = host.pack_module("nodes.host.loading")._load_diffusion_model
        self.handles = {n: Handle(load(files[n], "default")) for n in ("a", "b")}
        b = self.handles["b"].patcher
        self.diff = torch.full_like(b.model.state_dict()[PATCHED], 0.25)
        b.add_patches({PATCHED: (self.diff,)})
        self.base = b.model.state_dict()[PATCHED].clone()
        prefetch = host.pack_module("nodes.host.prefetch")
        self.ops = prefetch.HostPrefetch(stream, torch.device("cpu")) if stream else prefetch.HostPrefetch()
        planning = host.pack_module("memory.planning.planner")
        wl = host.pack_module("memory.planning.workload")
        cm = host.pack_module("memory.planning.costmodel")
        residency = host.pack_module("memory.residency")
        sizes = {n: self.ops.size(h) for n, h in self.handles.items()}
        workload = wl.Workload(
            tuple(wl.Component(n, n.upper(), sizes[n]) for n in ("a", "b")),
            (
                wl.Step("1", "one", ("a",), compute_s=1.0),
                wl.Step("2", "two", ("b",), compute_s=1.0),
                wl.Step("3", "three", ("a",), compute_s=1.0),
            ),
        )
        plan = planning.plan(workload, cm.Budget.from_card(24 * GB, 64 * GB), cm.Hardware.pcie(4))
        assert plan.steps[0].prefetch_ids == ["b"]
        self.controller = residency.Controller(host.pack_module("nodes.host.residency")._HostOps())
        self.controller.prefetcher = host.pack_module("memory.residency.prefetch").Prefetcher(self.ops)
        for n, h in self.handles.items():
            self.controller.register(n, n.upper(), h)
        self.controller.runs["p"] = residency.Run("p", workload, plan, time.monotonic())

    def loaded(self, name: str) -> bool:
        patcher = self.handles[name].patcher
        return any(lm.model is patcher for lm in self.mm.current_loaded_models)

    def weights(self, name: str) -> dict[str, int]:
        return {k: t.data_ptr() for k, t in self.handles[name].patcher.model.state_dict().items()}

    def events(self, kind: str) -> list[Any]:
        return [e for e in self.controller.log("p") if e.kind == kind and e.action == "prefetch"]


def moves_in_load_models_gpu(s: Setup, monkeypatch: pytest.MonkeyPatch) -> int:
    """The node's own load of B: how many of its tensors the host moved or rewrote (weight patches
    applied count too: they rewrite the tensor)."""
    patcher = s.handles["b"].patcher
    calls = []
    original = type(patcher).patch_weight_to_device
    monkeypatch.setattr(
        type(patcher),
        "patch_weight_to_device",
        lambda self, key, *a, **k: calls.append(key) or original(self, key, *a, **k),
    )
    before = s.weights("b")
    s.mm.load_models_gpu([patcher])
    after = s.weights("b")
    monkeypatch.undo()
    return sum(before[k] != after[k] for k in before) + len([c for c in calls if c in patcher.patches])


def test_the_upload_starts_before_the_node_computes_and_lands_in_the_hosts_accounting(
    host: Host, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    log: list[str] = []
    stream = FakeStream(log)
    s = Setup(host, files, stream)
    c = s.controller
    c.node_started("p", "1")
    log.append("node 1 computes")
    assert log == ["upload started", "node 1 computes"]
    assert s.loaded("a") and not s.loaded("b")  # the host's accounting has not seen the upload
    assert torch.equal(s.handles["b"].patcher.model.state_dict()[PATCHED], s.base)  # nothing patched yet
    c.node_finished("p", "1")
    assert not s.loaded("b")  # the copies have not landed: still not the host's
    stream.events[0].fire()
    c.node_started("p", "2")
    assert s.loaded("b") and s.mm.current_loaded_models[0].model is s.handles["b"].patcher
    assert torch.equal(
        s.handles["b"].patcher.model.state_dict()[PATCHED], s.base + s.diff
    )  # the host patched it
    assert moves_in_load_models_gpu(s, monkeypatch) == 0  # the node's load_models_gpu moves nothing
    applied = s.events("applied")
    assert [(e.node_id, e.component) for e in applied] == [("1", "b")]
    c.node_finished("p", "2")
    c.prompt_finished("p")
    s.mm.unload_all_models()  # the host's own unload undoes the patch: its backup is the CPU data
    assert torch.equal(s.handles["b"].patcher.model.state_dict()[PATCHED], s.base)


def test_landed_copies_join_the_accounting_when_the_node_ends(host: Host, files: dict[str, Path]) -> None:
    stream = FakeStream([])
    s = Setup(host, files, stream)
    s.controller.node_started("p", "1")
    stream.events[0].fire()
    s.controller.node_finished("p", "1")
    assert s.loaded("b")


def test_without_the_prefetch_the_nodes_load_moves_the_weights(
    host: Host, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counter above can see a load: the same node, nothing prefetched (the upload cancelled)."""
    s = Setup(host, files, FakeStream([]))
    s.controller.node_started("p", "1")
    s.controller.prompt_finished("p")
    assert not s.loaded("b") and moves_in_load_models_gpu(s, monkeypatch) > 0


@pytest.mark.parametrize("how", ["deviation", "oom", "interrupt", "failed"])
def test_a_deviation_an_oom_or_an_interrupt_cancels_the_upload(
    host: Host, files: dict[str, Path], how: str
) -> None:
    stream = FakeStream([])
    s = Setup(host, files, stream)
    c = s.controller
    c.node_started("p", "1")
    weights = s.weights("b")
    at_cancel = []  # the host's state when the cancel is logged (a re-plan may load it after)

    def listener(prompt_id: str, e: Any) -> None:
        if e.kind == "skipped" and e.action == "prefetch":
            patched = s.handles["b"].patcher.model.state_dict()[PATCHED]
            at_cancel.append((s.loaded("b"), s.weights("b") == weights, torch.equal(patched, s.base)))

    c.listeners.append(listener)
    if how == "deviation":  # node 3 starts where the plan expected node 2 (a lazy branch not taken)
        c.node_finished("p", "1")
        c.node_started("p", "3")
    elif how == "oom":  # the running node ran out of memory: the controller frees the device
        c.recover("p")
        s.controller.prefetcher.boundary("p", "1", "oom")  # the retry's prefetch is not this test's
    elif how == "interrupt":  # current hosts report no finish for the node that raised
        c.prompt_finished("p")
    else:
        c.node_finished("p", "1", ok=False)
    cancelled = s.events("skipped")
    why = {"deviation": "node 3 started, not node 2", "oom": "out of memory", "interrupt": "the prompt ended"}
    assert cancelled and cancelled[0].detail == f"cancelled: {why.get(how, 'the node failed')}"
    assert at_cancel[0] == (False, True, True)  # the host's accounting and tensors untouched
    del cancelled
    stream.events.clear()
    gc.collect()
    assert stream.copies and all(ref() is None for ref in stream.copies)  # the device copies are freed


def test_an_oom_while_allocating_the_copies_skips_the_prefetch(
    host: Host, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Setup(host, files, FakeStream([]))
    allocated = []

    def empty_like(t: torch.Tensor, **kw: Any) -> torch.Tensor:
        if len(allocated) == 3:
            raise s.mm.OOM_EXCEPTION("CUDA out of memory (injected)")
        allocated.append(torch.empty(t.shape, dtype=t.dtype))
        return allocated[-1]

    monkeypatch.setattr(torch, "empty_like", empty_like)
    s.controller.node_started("p", "1")
    monkeypatch.undo()
    assert [e.detail for e in s.events("oom")] == ["skipped"] and not s.loaded("b")
    assert not s.controller.prefetcher.inflight


def test_a_host_without_a_side_stream_loads_synchronously_and_says_why(
    host: Host, files: dict[str, Path]
) -> None:
    s = Setup(host, files, None)  # the real HostPrefetch on the CPU host: no CUDA
    s.controller.node_started("p", "1")
    notes = [e.detail for e in s.events("note")]
    assert notes == ["stays synchronous: the compute device is cpu: no CUDA side stream to upload on"]
    assert s.loaded("b")  # the host's own load_models_gpu, as before


def test_a_host_in_lowvram_mode_stays_synchronous(
    host: Host, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Setup(host, files, FakeStream([]))
    monkeypatch.setattr(s.mm, "vram_state", s.mm.VRAMState.LOW_VRAM)
    assert s.ops.why_sync(s.handles["b"]) == "the host runs in LOW_VRAM mode and loads models partially"
