"""The 2026 host's repeat run on CPU (ComfyUI 0.33): under the RAM-pressure cache the host frees pins and a
repeat run of a two-expert workflow reads weights from their files again; the plan predicts it; with
Headroom's retention nothing the RAM budget holds is read again.

What runs is the host's own: ``ModelPatcherDynamic`` and its host buffers (comfy-aimdo ``HostBuffer``, real
on CPU), ``load_models_gpu``, ``comfy.pinned_memory.pin_memory`` with its ``ensure_pin_budget``,
``free_pins`` with its tiers, ``PromptModelTracker`` (the current-prompt flag) and ``reset_cast_buffers``.
A node's compute is what the host's cast path does for a layer with no VRAM page: pin it on the way
(``comfy/ops.py`` ``handle_pin``). After each node, the RAM-pressure release of ``execution.py``
(``free_pins(shortfall + 512 MiB)`` when less than the active headroom is available) as 0.33 codes it. Faked
is what needs a GPU or a machine of that size: the device (a VBAR with no room, so every layer streams), the
CUDA host registration, and the RAM the host reads through psutil (available RAM falls by what the host
buffers hold). The weights are sparse safetensors files: they occupy no disk and, never read, no RAM.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.host

GiB = 2**30
CUDA = torch.device("cuda", 0)
MiB = 2**20
WIDTH = 4096  # fp32 4096 x 4096: a 64 MiB weight per layer
# A machine whose RAM leaves 896 MiB for host buffers above the host's 2 GiB floor (its pin margin and its
# RAM-pressure cache's active headroom, both 2 GiB below 20 GiB of RAM): the encoder and one and a half
# experts fit, not all three. The host buffers are real (comfy-aimdo allocates them): ~1 GiB in all.
TOTAL_RAM = 2 * GiB + 896 * MiB
LAYERS = {"te": 3, "high": 6, "low": 6}


@pytest.fixture(scope="module")
def core(request: pytest.FixtureRequest) -> SimpleNamespace:
    """The host's modules: the harness's host when it loads, else its memory modules imported directly."""
    if "comfy.model_management" not in sys.modules:
        try:
            request.getfixturevalue("host")
        except Exception:  # the harness cannot load this host's nodes (0.33: torchaudio): import directly
            from headroom_testing.harness import HostUnavailable, find_host_root

            try:
                root = find_host_root()
            except HostUnavailable as exc:
                pytest.skip(str(exc))
            if "comfy.model_management" not in sys.modules:
                sys.path.insert(0, str(root))
                from comfy.cli_args import args

                args.cpu = True
    import comfy.model_management as mm
    import comfy.model_patcher as mp

    if not hasattr(mm, "free_pins") or not hasattr(mp, "PromptModelTracker"):
        pytest.skip("this ComfyUI has no RAM-pressure pin release with a current-prompt flag (0.30+)")
    import comfy.memory_management as cmm
    import comfy_aimdo.control
    import comfy_aimdo.host_buffer

    assert comfy_aimdo.control.init(), "comfy-aimdo's library did not load"
    if comfy_aimdo.host_buffer.lib is None:  # imported before the library loaded (main.py loads it first)
        importlib.reload(comfy_aimdo.host_buffer)
    import comfy.ops
    import comfy.pinned_memory as pm
    import comfy.utils

    return SimpleNamespace(mm=mm, mp=mp, pm=pm, cmm=cmm, ops=comfy.ops, utils=comfy.utils)


def sparse_safetensors(path: Path, layers: int) -> None:
    """A safetensors file of ``layers`` Linear layers whose data is a hole: no disk, zeros when read."""
    header, offset = {}, 0
    for i in range(layers):
        for name, shape in ((f"layers.{i}.weight", [WIDTH, WIDTH]), (f"layers.{i}.bias", [WIDTH])):
            nbytes = 4 * int(torch.tensor(shape).prod())
            header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with path.open("wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        f.truncate(8 + len(text) + offset)


class NoRoomVBAR:
    """A VBAR on a device with no free page: every layer is copied from its host copy at each use."""

    def __init__(self, name: str) -> None:
        self.name = name

    def alloc(self, nbytes: int) -> tuple[Any, int, int]:
        return (self, 0, nbytes)

    def prioritize(self) -> None:
        pass

    def deprioritize(self) -> None:
        pass

    def loaded_size(self) -> int:
        return 0

    def free_memory(self, nbytes: int) -> int:
        return 0


class Machine:
    """The RAM the host reads (psutil) and the CUDA registration it calls, for a 16 GiB machine."""

    def __init__(self, core: SimpleNamespace) -> None:
        self.core, self.patchers = core, []

    def available(self) -> int:
        return TOTAL_RAM - sum(int(p.loaded_ram_size()) for p in self.patchers)

    def virtual_memory(self) -> Any:
        return SimpleNamespace(total=TOTAL_RAM, available=self.available())

    def cudart(self) -> Any:
        return SimpleNamespace(cudaHostRegister=lambda *a: 0, cudaHostUnregister=lambda *a: 0)


@pytest.fixture
def machine(core: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Machine:
    mm = core.mm
    m = Machine(core)
    monkeypatch.setattr(core.cmm, "aimdo_enabled", True)
    monkeypatch.setattr(mm, "get_torch_device", lambda: CUDA)
    monkeypatch.setattr(
        mm, "get_free_memory", lambda dev=None, torch_free_too=False: (0, 0) if torch_free_too else 0
    )
    monkeypatch.setattr(mm, "psutil", SimpleNamespace(virtual_memory=m.virtual_memory, swap_memory=None))
    monkeypatch.setattr(torch.cuda, "cudart", m.cudart)
    # the registration is faked both ways: a truncate unregisters nothing CUDA never registered
    import comfy_aimdo.host_buffer as hb

    truncate = hb.HostBuffer.truncate
    monkeypatch.setattr(
        hb.HostBuffer, "truncate", lambda self, size, do_unregister=True: truncate(self, size, False)
    )
    # the host's pinned cap for this machine (comfy/model_management.py, Linux, no swap)
    cap = max(0.4 * TOTAL_RAM, min(0.9 * TOTAL_RAM, TOTAL_RAM - 4 * GiB, TOTAL_RAM + 0 - 16 * GiB))
    monkeypatch.setattr(mm, "MAX_PINNED_MEMORY", cap)
    monkeypatch.setattr(mm, "TOTAL_PINNED_MEMORY", 0)
    before = list(mm.current_loaded_models)
    yield m
    for p in m.patchers:
        p.partially_unload_ram(1e32)
    mm.current_loaded_models[:] = before


class Layers(torch.nn.Module):
    def __init__(self, core: SimpleNamespace, depth: int) -> None:
        super().__init__()
        with torch.device("meta"):
            self.layers = torch.nn.ModuleList(
                core.ops.disable_weight_init.Linear(WIDTH, WIDTH) for _ in range(depth)
            )


def build(core: SimpleNamespace, machine: Machine, tmp: Path, name: str) -> Any:
    path = tmp / f"{name}.safetensors"
    sparse_safetensors(path, LAYERS[name])
    module = Layers(core, LAYERS[name])
    module.load_state_dict(core.utils.load_torch_file(str(path)), assign=True)  # aimdo maps the file
    module.model_loaded_weight_memory, module.current_weight_patches_uuid, module.device = 0, None, CUDA
    patcher = core.mp.ModelPatcherDynamic(module, CUDA, torch.device("cpu"))
    module.dynamic_vbars[CUDA] = NoRoomVBAR(name)
    machine.patchers.append(patcher)
    return patcher


def compute(core: SimpleNamespace, patcher: Any) -> int:
    """One node computing with ``patcher`` on the host: its load, then each layer's host copy (pinned on
    the way where the budget allows, as ``ops.py`` does for a layer with no VRAM page); returns the bytes
    read from the file (layers with no pin at their first use)."""
    core.mm.load_models_gpu([patcher])
    read = 0
    for layer in patcher.model.layers:
        size = core.cmm.vram_aligned_size([layer.weight, layer.bias])
        if core.pm.get_pin(layer, "weights") is None and core.pm.get_pin(layer, "weights-loaded") is None:
            read += size
            core.pm.pin_memory(layer, subset="weights", size=size)
    return read


def after_node(core: SimpleNamespace, machine: Machine, headroom: int) -> None:
    """What the host runs after a node with the RAM-pressure cache (0.33 execution.py, the cache's own
    release aside: this workflow's outputs are all models of the current prompt)."""
    core.mm.reset_cast_buffers()
    shortfall = headroom - machine.available()
    if core.mm.should_free_pins_for_ram_pressure(shortfall):
        core.mm.free_pins(shortfall + 512 * 2**20)


def two_runs(core: SimpleNamespace, machine: Machine, tmp: Path, retention: bool) -> dict[str, int]:
    """The workflow (encode, high expert, low expert) run, then run again with a new seed: the encode is
    served from the cache. Returns what the repeat run read from the files, per model."""
    from comfyui_headroom.memory.planning.costmodel import Tier
    from comfyui_headroom.memory.planning.planner import Placement, StepPlan
    from comfyui_headroom.memory.planning.workload import Step
    from comfyui_headroom.memory.residency import dynamic_policy as policy
    from comfyui_headroom.nodes.host import dynamic_vram

    tmp.mkdir(parents=True, exist_ok=True)
    patchers = {name: build(core, machine, tmp, name) for name in LAYERS}
    headroom = int(min(10, max(2, 0.1 * TOTAL_RAM / GiB)) * GiB)  # --cache-ram's default active headroom
    core.cmm.set_ram_cache_release_state(None, headroom)
    rows = [("4", ("te",)), ("7", ("high",)), ("8", ("low",))]
    plan = [
        StepPlan(Step(n, "Node", uses), {c: Placement(Tier.GPU_RAM) for c in uses}, 0, 0, 0, 0.0)
        for n, uses in rows
    ]
    repeat = [("high",), ("low",)]
    reads: dict[str, int] = {}
    try:
        for run, steps in ((1, plan), (2, plan[1:])):
            tracker = core.mp.PromptModelTracker()
            tracker.start()
            # ExecutionList links every cached loader output to the nodes that will run when the prompt
            # starts (cache_link -> the tracker's add); in the first run the loaders run first
            for sp in steps:
                tracker.add([patchers[c] for c in sp.step.uses])
            for s, sp in enumerate(steps):
                if retention:  # the controller's boundary (nodes/host/dynamic_vram.py DynamicBoundaries)
                    held = [dynamic_vram.resident(c, c, p) for c, p in patchers.items()]
                    for move in policy.boundary_moves(steps, s, held, repeat):
                        if move.action == policy.RELEASE:
                            assert dynamic_vram.to_disk(patchers[move.component_id]) == ""
                (name,) = sp.step.uses
                read = compute(core, patchers[name])
                if run == 2 and read:
                    reads[name] = reads.get(name, 0) + read
                after_node(core, machine, headroom)
            tracker.end()
    finally:
        core.cmm.set_ram_cache_release_state(None, 0)
    return reads


def predicted(retention: bool) -> dict[str, int]:
    from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
    from comfyui_headroom.memory.planning.paging_host import paging_host
    from comfyui_headroom.memory.planning.workload import Component, Step, Workload

    layer = 4 * WIDTH * WIDTH + 4 * WIDTH
    comps = tuple(Component(n, n, k * layer, tuple([layer] * k)) for n, k in LAYERS.items())
    steps = (
        Step("4", "CLIPTextEncode", ("te",)),
        Step("7", "KSampler", ("high",)),
        Step("8", "KSampler", ("low",)),
    )
    budget = Budget(vram=1, ram=TOTAL_RAM, pinned=TOTAL_RAM, reserve=0)
    out = paging_host(Workload(comps, steps), budget, Hardware.pcie(4), rerun={"7", "8"}, headroom=retention)
    return out.reloads


def test_the_repeat_run_reloads_what_the_plan_predicts_and_retention_reloads_nothing(
    core: SimpleNamespace, machine: Machine, tmp_path: Path
) -> None:
    host = two_runs(core, machine, tmp_path / "host", retention=False)
    plan = predicted(retention=False)
    assert host, "under the RAM-pressure cache the host reads weights again in the repeat run"
    assert set(plan) == set(host)  # the plan names the models the host reloads
    for name, nbytes in host.items():
        # within a layer: the host frees and pins whole layers, the plan counts bytes
        assert abs(plan[name] - nbytes) < 64 * MiB, (name, plan[name], nbytes)


def test_with_headroom_retention_the_repeat_run_reads_nothing_the_budget_holds(
    core: SimpleNamespace, machine: Machine, tmp_path: Path
) -> None:
    # the budget holds both experts (2 x 384 MiB) above the host's 2 GiB free-RAM floor, not the encoder too
    experts = 2 * 6 * 4 * (WIDTH * WIDTH + WIDTH)
    assert experts <= TOTAL_RAM - 2 * GiB < experts + 3 * 4 * (WIDTH * WIDTH + WIDTH)
    assert two_runs(core, machine, tmp_path / "kept", retention=True) == {}
    assert predicted(retention=True) == {}


def test_the_controller_gives_back_the_pins_of_a_model_the_graph_is_done_with(
    core: SimpleNamespace, machine: Machine, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The same release through the residency controller at a node boundary (DynamicBoundaries), logged
    per move with its reason: the encoder's pins go back when the high expert's node starts."""
    try:
        host = request.getfixturevalue("host")
    except Exception as exc:  # the harness could not load this host with the pack
        pytest.skip(f"the pack's controller needs the harness: {exc}")
    import time

    state = host.pack_module("nodes.host.state")
    host.reset_process_state()
    (tmp_path / "m").mkdir()
    patchers = {name: build(core, machine, tmp_path / "m", name) for name in LAYERS}
    ids = {name: f"{n}:{name}:model" for n, name in enumerate(LAYERS, 1)}
    loading, run_log = host.pack_module("nodes.host.loading"), host.pack_module("memory.residency.run_log")
    controller = state.residency().controller
    for name, patcher in patchers.items():
        path = tmp_path / "m" / f"{name}.safetensors"
        handle = loading.ComponentHandle(
            ids[name], path.name, "diffusion_model", patcher, patcher.model, [path], "auto"
        )
        controller.register(ids[name], path.name, handle)
    compute(core, patchers["te"])
    assert patchers["te"].loaded_ram_size() > 0
    from comfyui_headroom.memory.planning.costmodel import Budget, Hardware, Tier
    from comfyui_headroom.memory.planning.planner import Placement, Plan, StepPlan
    from comfyui_headroom.memory.planning.workload import Component, Step, Workload

    comps = tuple(Component(ids[n], n, int(p.model_size())) for n, p in patchers.items())
    steps = [
        Step("4", "Node", (ids["te"],)),
        Step("7", "Node", (ids["high"],)),
        Step("8", "Node", (ids["low"],)),
    ]
    plans = [StepPlan(st, {st.uses[0]: Placement(Tier.GPU_RAM)}, 0, 0, 0, 0.0) for st in steps]
    budget = Budget(vram=2**30, ram=TOTAL_RAM, pinned=TOTAL_RAM)
    plan = Plan(True, plans, 0.0, 0.0, 0, "", budget, Hardware.pcie(4), 1)
    run = run_log.Run("rel-1", Workload(comps, tuple(steps)), plan, time.monotonic())
    run.managed_ids, run.position = frozenset(controller.managed), 1
    controller.runs["rel-1"] = run
    residency = state.residency()
    residency.node_started("rel-1", "7")
    moves = [e for e in residency.controller.log("rel-1") if e.action == "unpin" and e.kind == "applied"]
    assert [e.component for e in moves] == [ids["te"]]
    assert "not needed again in this prompt" in moves[0].detail and "most recently loaded" in moves[0].detail
    assert patchers["te"].loaded_ram_size() == 0


def test_the_bound_gauges_read_the_hosts_pins_and_comfy_aimdos_vram_by_their_names(
    core: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a node's "bounded by" line reads from this host (nodes/host/host_gauges.py): its pinned total,
    and comfy-aimdo's own VRAM figure through its Python function (the native call stands in: no device)."""
    from comfyui_headroom.nodes.host import host_gauges

    monkeypatch.setattr(core.mm, "TOTAL_PINNED_MEMORY", 3 * GiB)
    assert host_gauges.host_pinned() == 3 * GiB
    vram, note = host_gauges.aimdo_vram()
    assert vram is None and note.startswith("DynamicVRAM is off")  # a CPU host pages nothing
    control = sys.modules["comfy_aimdo.control"]
    monkeypatch.setattr(core.cmm, "aimdo_enabled", True)
    monkeypatch.setattr(control, "devctxs", [1, 2])
    monkeypatch.setattr(control.lib, "get_total_vram_usage", lambda devctx: devctx * GiB)
    assert host_gauges.aimdo_vram() == (3 * GiB, "")
    assert host_gauges.gauges() == {
        "host_pinned": 3 * GiB,
        "aimdo_vram": 3 * GiB,
        "aimdo_note": "",
        "aimdo_pageouts": None,  # this host's aimdo (0.4.13) takes no page-out callback
        "aimdo_pageout_bytes": None,
    }
