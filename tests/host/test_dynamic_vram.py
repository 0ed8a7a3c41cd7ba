"""DynamicVRAM (comfy-aimdo) hosts on CPU: the residency plan acting through the host's own classes.

The host's ``ModelPatcherDynamic``, ``LoadedModel``, ``load_models_gpu``, ``partially_unload``,
``partially_unload_ram`` and ``model_mmap_residency`` run for real, and the weights are mapped by
comfy-aimdo's own ``ModelMMAP`` through the host's ``load_torch_file`` (both run without CUDA). Faked
is only what needs a GPU: the VBAR (``FakeVBAR``: aimdo's priority list and its pages, as
``model-vbar.c`` keeps them), the device queries (``get_torch_device``, ``get_free_memory``) and a pin's
page-locked buffer. The models are stacks of the host's ``comfy.ops`` Linear layers (the layers
DynamicVRAM pages): a model class with buffers would need CUDA to load.

Hosts without ``ModelPatcherDynamic`` (before 0.18) skip this file; the controller's behaviour there is
the one the other host tests check.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch

from headroom_testing.harness import Host

pytestmark = pytest.mark.host

CUDA = torch.device("cuda", 0)
HIGH, LOW, CLIP = (
    "1:diffusion_model:diffusion_model",
    "2:diffusion_model:diffusion_model",
    "1:text_encoder_1:text_encoder",
)


class FakeAimdo:
    """aimdo's state for one device: its VBARs from lowest to highest priority, and the VRAM pages."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.priority: list[FakeVBAR] = []  # lowest first: the fault path frees from here up

    def used(self) -> int:
        return sum(v.pages for v in self.priority)

    def fault(self, vbar: FakeVBAR, nbytes: int) -> list[tuple[str, int]]:
        """A first touch of ``nbytes`` of ``vbar``: frees pages from the lowest-priority VBAR up
        (``vbars_free_for_vbar``) until they fit; returns (name, bytes) taken from each."""
        taken = []
        short = self.used() + nbytes - self.capacity
        for other in list(self.priority):
            if short <= 0:
                break
            if other is vbar or not other.pages:
                continue
            freed = min(short, other.pages)
            other.pages -= freed
            short -= freed
            taken.append((other.name, freed))
        vbar.pages += nbytes
        return taken


class FakeVBAR:
    """``comfy_aimdo.model_vbar.ModelVBAR`` without CUDA: the calls the host and Headroom make."""

    def __init__(self, aimdo: FakeAimdo, name: str) -> None:
        self.aimdo, self.name, self.pages, self.offset = aimdo, name, 0, 0
        aimdo.priority.append(self)  # vbar_allocate inserts at the top

    def prioritize(self) -> None:
        self.aimdo.priority.remove(self)
        self.aimdo.priority.append(self)

    def deprioritize(self) -> None:
        self.aimdo.priority.remove(self)
        self.aimdo.priority.insert(0, self)

    def alloc(self, nbytes: int) -> tuple[Any, int, int]:
        alloc = (self, self.offset, nbytes)
        self.offset += nbytes
        return alloc

    def loaded_size(self) -> int:
        return self.pages

    def free_memory(self, nbytes: int) -> int:
        freed = min(int(nbytes), self.pages)
        self.pages -= freed
        return freed


@pytest.fixture
def dynamic(host: Host, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The host with DynamicVRAM on (a fake device of 64 MiB); the pack's residency made fresh."""
    import comfy.model_patcher as mp

    if not hasattr(mp, "ModelPatcherDynamic"):
        pytest.skip(f"ComfyUI {host.version} has no ModelPatcherDynamic (DynamicVRAM came with 0.18)")
    import comfy.memory_management as cmm
    import comfy_aimdo.control

    assert comfy_aimdo.control.init(), "comfy-aimdo's library did not load (its mmap runs on CPU)"
    for module in list(sys.modules.values()):  # imported before init (main.py inits first): bind lib now
        if getattr(module, "__name__", "").startswith("comfy_aimdo.") and vars(module).get("lib", 0) is None:
            importlib.reload(module)
    mm = host.model_management
    aimdo = FakeAimdo(64 * 2**20)
    free = lambda dev=None, torch_free_too=False: (  # noqa: E731
        (aimdo.capacity - aimdo.used(), 0) if torch_free_too else aimdo.capacity - aimdo.used()
    )
    monkeypatch.setattr(cmm, "aimdo_enabled", True)
    monkeypatch.setattr(mm, "get_torch_device", lambda: CUDA)
    monkeypatch.setattr(mm, "get_free_memory", free)
    host.reset_process_state()
    before = list(mm.current_loaded_models)
    yield aimdo
    host.reset_process_state()
    mm.current_loaded_models[:] = before


class Layers(torch.nn.Module):
    """A model of the host's comfy.ops Linear layers (``width`` wide, ``depth`` deep); ``plain``: torch's
    own Linear, for the file's weights (0.33's comfy.ops Linear under DynamicVRAM has no weight until
    it loads a state dict)."""

    def __init__(self, width: int, depth: int, plain: bool = False) -> None:
        import comfy.ops

        super().__init__()
        linear = torch.nn.Linear if plain else comfy.ops.disable_weight_init.Linear
        self.layers = torch.nn.ModuleList(linear(width, width) for _ in range(depth))


def build(host: Host, aimdo: FakeAimdo, tmp: Path, name: str, width: int, depth: int) -> tuple[Any, Path]:
    """A ModelPatcherDynamic whose weights aimdo maps from a safetensors file, loaded by the host."""
    import comfy.model_patcher as mp
    import comfy.utils
    from safetensors.torch import save_file

    torch.manual_seed(len(name))
    reference = Layers(width, depth, plain=True)
    for p in reference.parameters():
        torch.nn.init.normal_(p)
    path = tmp / f"{name}.safetensors"
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, path)
    module = Layers(width, depth)
    module.load_state_dict(comfy.utils.load_torch_file(str(path)), assign=True)  # aimdo's ModelMMAP
    module.model_loaded_weight_memory, module.current_weight_patches_uuid, module.device = 0, None, CUDA
    patcher = mp.ModelPatcherDynamic(module, CUDA, torch.device("cpu"))
    module.dynamic_vbars[CUDA] = FakeVBAR(aimdo, name)
    host.model_management.load_models_gpu([patcher])  # the host stages it and prioritizes its VBAR
    return patcher, path


def fake_pin(patcher: Any, layer: Any, pinned: int) -> None:
    """A pin of ``layer``'s weights as the host keeps one, without page-locking (no CUDA): 0.18 holds it
    on the layer (``_pin``); 0.33 in the patcher's per-device pin state, a stack of (layer, offset) in one
    aimdo HostBuffer with the layer's ``_pins`` entry, the pinned total and the balancer's bucket."""
    pins = getattr(patcher.model, "dynamic_pins", None)
    if pins is None:
        layer._pin, layer._pin_hostbuf = torch.empty(pinned, dtype=torch.uint8), object()
        return
    import comfy_aimdo.host_buffer
    import comfy_aimdo.torch

    state = pins[patcher.load_device]
    _, stack, stack_split, pinned_size, *rest = state["weights"]

    class CpuHostBuffer(comfy_aimdo.host_buffer.HostBuffer):  # no page-locking on CPU: none to undo
        def truncate(self, offset: int, do_unregister: bool = True) -> Any:
            return super().truncate(offset, do_unregister=False)

    hostbuf = CpuHostBuffer(0, 0, 2 * pinned)  # room to grow, as the host sizes it
    state["weights"] = (hostbuf, stack, stack_split, pinned_size, *rest)
    offset = hostbuf.size
    hostbuf.extend(size=pinned, register=False)
    entry = [0, 0, layer]
    layer.__dict__.setdefault("_pins", {})["weights"] = {
        "pin": comfy_aimdo.torch.hostbuf_to_tensor(hostbuf)[offset : offset + pinned],
        "registered": True,  # the host counts registered pins only
        "stack_index": len(stack),
        "balancer_entry": entry,
    }
    stack.append((layer, offset))
    stack_split[0] = len(stack) - 1
    pinned_size[0] += pinned


def register(host: Host, cid: str, kind: str, patcher: Any, path: Path) -> Any:
    loading = host.pack_module("nodes.host.loading")
    handle = loading.ComponentHandle(cid, path.name, kind, patcher, patcher.model, [path], "auto")
    host.pack_module("nodes.host.state").residency().controller.register(cid, path.name, handle)
    return handle


def start_run(
    host: Host,
    prompt_id: str,
    rows: list[tuple[str, tuple[str, ...], dict[str, int]]],
    activation: int = 0,
    vram: int = 64 * 2**20,
) -> Any:
    """A run of the controller on a plan given row by row: (node, uses, {component: tier}); the
    components' bytes are the tiny models' sizes; each step's activations ``activation``, on a card of
    ``vram``."""
    planner = host.pack_module("memory.planning.planner")
    workload_mod = host.pack_module("memory.planning.workload")
    costmodel = host.pack_module("memory.planning.costmodel")
    run_log = host.pack_module("memory.residency.run_log")
    controller = host.pack_module("nodes.host.state").residency().controller
    components = tuple(
        workload_mod.Component(cid, m.label, int(m.handle.patcher.model_size()))
        for cid, m in controller.managed.items()
    )
    steps = [workload_mod.Step(node, "Node", uses, activation=activation) for node, uses, _ in rows]
    plans = [
        planner.StepPlan(
            step, {c: planner.Placement(costmodel.Tier(t)) for c, t in tiers.items()}, 0, 0, 0, 0.0
        )
        for step, (_, _, tiers) in zip(steps, rows, strict=True)
    ]
    budget = costmodel.Budget(vram=vram, ram=2**34, pinned=2**30)
    plan = planner.Plan(True, plans, 0.0, 0.0, 0, "", budget, costmodel.Hardware.pcie(4), 1)
    run = run_log.Run(prompt_id, workload_mod.Workload(components, tuple(steps)), plan, time.monotonic())
    run.managed_ids = frozenset(controller.managed)
    controller.runs[prompt_id] = run
    return run


G, RAM = 1, 7  # Tier.GPU_RAM, Tier.RAM


def test_the_plans_evictions_are_released_to_the_host_in_its_order_never_paged_out_whole(
    host: Host, dynamic: FakeAimdo, tmp_path: Path
) -> None:
    """Wan 2.2's shape at the low-noise expert's node: the plan moves the high-noise expert and the encoder
    off (not needed again). They go to the bottom of the host's list, the larger lowest, and keep their
    pages: the controller counts them off and pages nothing out, and the low expert's faults take the high
    expert's pages first, only as many as they need. The low expert is the host's to page in; the log
    says so, and never "applied" for what did not happen."""
    mm = host.model_management
    high, high_path = build(host, dynamic, tmp_path, "high", 512, 8)
    clip, clip_path = build(host, dynamic, tmp_path, "clip", 512, 4)
    low, low_path = build(host, dynamic, tmp_path, "low", 512, 8)
    register(host, HIGH, "diffusion_model", high, high_path)
    handle_clip = register(host, CLIP, "text_encoder", clip, clip_path)
    register(host, LOW, "diffusion_model", low, low_path)
    dynamic.fault(clip.model.dynamic_vbars[CUDA], clip.model_size())  # the encode ran, then the high expert
    dynamic.fault(high.model.dynamic_vbars[CUDA], high.model_size())
    start_run(
        host,
        "dyn-1",
        [("4", (CLIP,), {CLIP: G}), ("7", (HIGH,), {HIGH: G}), ("8", (LOW,), {LOW: G}), ("9", (), {})],
    ).position = 2
    residency = host.pack_module("nodes.host.state").residency()
    residency.node_started("dyn-1", "8")

    log = residency.controller.log("dyn-1")
    moves = [(e.kind, e.action, e.component) for e in log if e.action]
    assert moves[:2] == [("applied", "deprioritize", CLIP), ("applied", "deprioritize", HIGH)]
    assert all(
        "not needed again in this prompt" in e.detail and "released" in e.detail
        for e in log
        if e.action == "deprioritize"
    )
    assert not [e for e in log if e.action == "evict"]  # counted off: the controller pages nothing out
    assert high.loaded_size() == high.model_size() and clip.loaded_size() == clip.model_size()
    assert [v.name for v in dynamic.priority][:2] == ["high", "clip"]  # the larger lowest
    dynamic.capacity = high.model_size() + clip.model_size() + low.model_size() // 2
    assert [n for n, _ in dynamic.fault(low.model.dynamic_vbars[CUDA], low.model_size())] == ["high"]
    load = [e for e in log if e.action == "load"]
    assert [(e.kind, e.component) for e in load] == [("skipped", LOW)]
    assert "DynamicVRAM pages it in" in load[0].detail
    assert not any(e.kind == "applied" and e.action == "load" for e in log)  # never "applied" for nothing
    # where the controller still evicts (a replaced loader, a re-plan), the host pages the model out
    # whole and keeps it listed and staged
    residency.node_started("dyn-1", "9")  # the encoder stays released: nothing computes with it
    assert residency.controller.ops.on_gpu(handle_clip) == 0  # off, as the plan has it
    residency.dynamic.released.clear()
    assert residency.controller.ops.on_gpu(handle_clip) == clip.model_size()
    residency.controller.ops.evict(handle_clip)
    assert clip.loaded_size() == 0 and any(lm.model is clip for lm in mm.current_loaded_models)


def test_idle_models_the_plan_keeps_are_ordered_by_next_use_not_recency(
    host: Host, dynamic: FakeAimdo, tmp_path: Path
) -> None:
    """A high expert used again after the low one (a refine pass) and a second text encode in between:
    by recency the low expert's faults take the high expert's pages, the one needed next; after
    Headroom's boundary they take the encoder's (never needed again) first. Side by side, same state."""
    high, high_path = build(host, dynamic, tmp_path, "high", 512, 8)
    clip, clip_path = build(host, dynamic, tmp_path, "clip", 512, 8)
    low, low_path = build(host, dynamic, tmp_path, "low", 512, 8)
    register(host, HIGH, "diffusion_model", high, high_path)
    register(host, CLIP, "text_encoder", clip, clip_path)
    register(host, LOW, "diffusion_model", low, low_path)
    vbar = {p.model.dynamic_vbars[CUDA].name: p.model.dynamic_vbars[CUDA] for p in (high, clip, low)}
    size = high.model_size()
    dynamic.capacity = 2 * size + size // 2  # two models and a half fit
    dynamic.fault(vbar["high"], size)
    dynamic.fault(vbar["clip"], size)
    for name in ("high", "clip", "low"):  # recency: the host's loads in the order the nodes ran
        vbar[name].prioritize()
    recency = [v.name for v in dynamic.priority]
    assert recency == ["high", "clip", "low"]
    by_recency = FakeAimdo(dynamic.capacity)  # the same state, left to the host's order
    for name in recency:
        copy = FakeVBAR(by_recency, name)
        copy.pages = vbar[name].pages
    assert [n for n, _ in by_recency.fault(by_recency.priority[-1], size)] == ["high"]

    keep = {HIGH: G, CLIP: G, LOW: G}
    start_run(
        host,
        "dyn-2",
        [("7", (HIGH,), keep), ("5", (CLIP,), keep), ("8", (LOW,), keep), ("9", (HIGH,), {HIGH: G})],
    ).position = 2
    residency = host.pack_module("nodes.host.state").residency()
    residency.node_started("dyn-2", "8")
    order = [e for e in residency.controller.log("dyn-2") if e.action == "deprioritize"]
    assert [(e.kind, e.component) for e in order] == [("applied", HIGH), ("applied", CLIP)]
    assert "needed again in 1 node" in order[0].detail and "not needed again" in order[1].detail
    assert [v.name for v in dynamic.priority] == ["clip", "high", "low"]
    assert [n for n, _ in dynamic.fault(vbar["low"], size)] == ["clip"]  # the encoder's pages, not high's
    assert vbar["high"].pages == size


def test_an_idle_copy_leaves_ram_through_the_hosts_unpin_and_unmap(
    host: Host, dynamic: FakeAimdo, tmp_path: Path
) -> None:
    """The RAM guard's disk tier for a dynamic model: the host's partially_unload_ram releases its pins
    and model_mmap_residency(free=True) drops the touched pages of aimdo's mapping."""
    import comfy.model_management as mm

    patcher, path = build(host, dynamic, tmp_path, "expert", 256, 4)
    handle = register(host, HIGH, "diffusion_model", patcher, path)
    layer = patcher.model.layers[0]
    pinned = layer.weight.nbytes + layer.bias.nbytes
    fake_pin(patcher, layer, pinned)
    mm.TOTAL_PINNED_MEMORY += pinned
    for t in (layer.weight, layer.bias):  # as the host's cast marks a mapped tensor it copied from
        t.untyped_storage()._comfy_tensor_mmap_touched = True
    residency = host.pack_module("nodes.host.residency")
    ram_ops = host.pack_module("nodes.host.state").residency().ram_guard.ops
    assert ram_ops.host_bytes(handle) == (0, pinned)  # mapped pages are page cache, not RssAnon
    mapped = hasattr(patcher, "model_mmap_residency")  # 0.18; 0.33 leaves the mapping to aimdo
    assert not mapped or patcher.model_mmap_residency()[0] > 0
    assert ram_ops.to_disk(handle) == ""
    assert ram_ops.host_bytes(handle) == (0, 0) and patcher.pinned_memory_size() == 0
    assert not mapped or patcher.model_mmap_residency()[0] == 0
    assert residency.host_part(handle) == "D"
    assert "pins per layer" in residency.place_host_copy(handle, "P")  # never our own pinned copy


def test_the_streamer_leaves_a_dynamic_model_to_the_host(
    host: Host, dynamic: FakeAimdo, tmp_path: Path
) -> None:
    patcher, path = build(host, dynamic, tmp_path, "expert", 128, 2)
    handle = register(host, HIGH, "diffusion_model", patcher, path)
    ops = host.pack_module("nodes.host.state").residency().controller.ops
    note = ops.stream(handle, 2**20)
    assert note.startswith("not streamed: ComfyUI's DynamicVRAM") and "--disable-dynamic-vram" in note
    # a Stream Model node's sampling of it: the session does not attach, and says why on the node
    sampling = host.pack_module("nodes.host.sampling")
    session = sampling._Session(sampling.StreamSettings(budget=2**20), patcher, None)
    session._attach(SimpleNamespace(diffusion_model=patcher.model), {"input": torch.zeros(1, 4)})
    assert session.streamer is None and session.run.note == note


def test_without_dynamic_vram_the_boundaries_do_nothing(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hosts without aimdo (0.3.x, the 2024 host, 0.18 with --disable-dynamic-vram): the controller alone."""
    mm_module = ModuleType("comfy.memory_management")
    import sys

    monkeypatch.setitem(sys.modules, "comfy.memory_management", mm_module)
    dyn = host.pack_module("nodes.host.dynamic_vram")
    lookups = host.pack_module("nodes.host.lookups")
    assert not lookups.dynamic_vram_active()

    class Untouchable:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"the boundaries read the controller's {name} without DynamicVRAM")

    boundaries = dyn.DynamicBoundaries()
    boundaries.prompt_started(Untouchable(), "p", {})
    boundaries.node_started(Untouchable(), "p", "1")


def test_opted_in_aimdos_headroom_follows_the_plan_per_node_and_comes_back_at_the_end(
    host: Host, dynamic: FakeAimdo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#40 item 6: with HEADROOM_AIMDO_HEADROOM=1 the controller sets comfy-aimdo's VRAM headroom at each
    planned node to the node's planned activations, and the host's value is back when the prompt ends.
    This host's aimdo (0.4.13) has no setter: stand-ins with 0.5.5/0.6.0's signatures are put on its real
    control module. Its ModelVBAR takes no page-out callback, which the counter says instead of wrapping."""
    import comfy_aimdo.control

    values = [512 * 2**20]
    monkeypatch.setattr(comfy_aimdo.control, "get_simple_vram_headroom", lambda: values[-1], raising=False)
    monkeypatch.setattr(comfy_aimdo.control, "set_simple_vram_headroom", values.append, raising=False)
    monkeypatch.setenv("HEADROOM_AIMDO_HEADROOM", "1")
    model, path = build(host, dynamic, tmp_path, "high", 512, 8)
    register(host, HIGH, "diffusion_model", model, path)
    start_run(
        host, "dyn-h", [("7", (HIGH,), {HIGH: G}), ("9", (), {})], activation=3 * 2**30, vram=16 * 2**30
    )
    residency = host.pack_module("nodes.host.state").residency()
    residency.node_started("dyn-h", "7")
    assert values == [512 * 2**20, 3 * 2**30]
    residency.prompt_finished("dyn-h")
    assert values[-1] == 512 * 2**20  # the host's value, back through the registry's undo
    hooks = host.pack_module("nodes.host.aimdo_hooks")
    assert hooks.count_pageouts().startswith("off: this comfy-aimdo's ModelVBAR takes no pageout_callback")
