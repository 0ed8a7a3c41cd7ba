"""Every patch of the host goes through one registry and comes off exactly, on every host: install,
run a prompt (each per-prompt hook fires), uninstall (every attribute of ``execution``, of
``PromptExecutor`` and of the server is the host's own again, by identity), install again."""

from __future__ import annotations

from typing import Any

import pytest

from headroom_testing.harness import Host

pytestmark = pytest.mark.host
PROMPT = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 16, "height": 16, "batch_size": 1, "color": 0}},
    "2": {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": ["1", 0]}},
}


class Server:
    """The PromptServer attributes the pack writes to: its route table and on-prompt handlers."""

    def __init__(self) -> None:
        from aiohttp import web

        self.routes = web.RouteTableDef()
        self.on_prompt_handlers: list[Any] = []

    def add_on_prompt_handler(self, handler: Any) -> None:
        self.on_prompt_handlers.append(handler)


def snapshot(host: Host, server: Server) -> dict[str, dict[str, Any]]:
    return {
        "execution": dict(vars(host.execution)),
        "PromptExecutor": dict(vars(host.execution.PromptExecutor)),
        "server": dict(vars(server)),
        "routes": {"items": list(server.routes)},
        "handlers": {"items": list(server.on_prompt_handlers)},
    }


def same(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> list[str]:
    """What differs, by identity (a wrapper equal to nothing but itself)."""
    diffs = []
    for part in a:
        for key in a[part].keys() | b[part].keys():
            x, y = a[part].get(key, "<absent>"), b[part].get(key, "<absent>")
            if isinstance(x, list) and isinstance(y, list):
                if len(x) != len(y) or any(i is not j for i, j in zip(x, y, strict=True)):
                    diffs.append(f"{part}.{key}")
            elif x is not y:
                diffs.append(f"{part}.{key}")
    return diffs


def test_install_then_uninstall_leaves_every_host_object_as_it_was(host: Host) -> None:
    pack = host.pack_module("nodes.host")
    registry = host.pack_module("nodes.host.patches").REGISTRY
    state = host.pack_module("nodes.host.state")
    assert pack.uninstall_monitor() >= 4  # what the pack's import installed
    server = Server()
    before = snapshot(host, server)
    hooks = pack.install_monitor(server)
    try:
        assert hooks["nodes"] == "on" and hooks["server"] == "on", hooks
        changed = same(before, snapshot(host, server))
        assert {
            "execution.validate_prompt",
            "execution.get_output_data",
            "PromptExecutor.add_message",
        } <= set(changed)
        assert "server._headroom_routes" in changed and "handlers.items" in changed
        host.run(PROMPT)
        host.run(PROMPT, prompt_id="second")
        fired = registry.state()
        boundary = "execution.recursive_execute" if host.legacy else "execution.reset_progress_state"
        for name in (boundary, "execution.PromptExecutor.add_message", "execution.validate_prompt"):
            assert fired[name]["installed"] == 1 and fired[name]["fired"] >= 2, (name, fired)
    finally:
        undone = pack.uninstall_monitor()
    assert undone >= len(changed)  # a patch per changed attribute (two wrap get_output_data in 2024)
    assert same(before, snapshot(host, server)) == []
    assert not [k for k in registry.state() if k.startswith(("execution.", "server."))]
    assert state.monitor().hooks == {}
    assert pack.install_monitor()["nodes"] == "on"  # as the pack's import left it


def _by_identity(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return sorted(k for k in a.keys() | b.keys() if a.get(k, "<absent>") is not b.get(k, "<absent>"))


def test_every_other_patch_comes_off_exactly(host: Host, tmp_path: Any) -> None:
    """The patches made per model or per prompt, each installed and uninstalled through the registry on
    this host: the host's load held back on a patcher, the 2024 host's apply_model of an armed model, the
    prefetch's entry in current_loaded_models, the Stream CLIP class swap of our clone and the prompt_id
    written into a posted prompt. Each object is as before, attribute by attribute, by identity."""
    import copy

    import torch

    from headroom_testing.tiny_models import build_tiny_sd_checkpoint

    registry = host.pack_module("nodes.host.patches").REGISTRY
    name = "tiny_sd15_patches.safetensors"
    build_tiny_sd_checkpoint(host.models_dir, name=name, seed=3)
    host.register_models_dir(host.models_dir)
    with torch.inference_mode():
        model, clip, _ = host.node_class("CheckpointLoaderSimple")().load_checkpoint(name)
    installed: list[str] = []

    # the host's load held back (current hosts: ModelPatcher.load takes lowvram_model_memory, full_load)
    patcher = model.clone()
    before = dict(vars(patcher))
    undo = host.pack_module("nodes.host.host_load").hold_back(patcher)
    if undo is not None:
        installed.append("hold_back")
        assert _by_identity(before, dict(vars(patcher))) == ["load"]
        undo()
    assert _by_identity(before, dict(vars(patcher))) == []

    # a model armed for streaming, then disarmed (2024: its BaseModel's apply_model; else wrappers)
    sampling = host.pack_module("nodes.host.sampling")
    base = dict(vars(model.model))
    armed = sampling.arm(model, [], sampling.StreamSettings())
    if armed.legacy is not None:
        installed.append("apply_model")
        assert _by_identity(base, dict(vars(model.model))) == ["apply_model"]
    sampling.disarm(armed, [])
    assert _by_identity(base, dict(vars(model.model))) == [] and sampling.streamed_model_of(model) is None

    # the prefetch's entry in the host's list of loaded models
    mm = host.model_management
    mm.unload_all_models()
    listed = list(mm.current_loaded_models)
    handle = type("Handle", (), {"patcher": model, "module": model.model})()
    prefetch = host.pack_module("nodes.host.prefetch")
    upload = prefetch.HostUpload(None, 0, [])
    prefetch.HostPrefetch(device=torch.device("cpu")).land(handle, upload)
    installed.append("current_loaded_models")
    assert len(mm.current_loaded_models) == len(listed) + 1
    entry = mm.current_loaded_models[0]
    assert registry.uninstall(prefix="model_management.current_loaded_models") == 1
    entry.model_unload()  # the host's own state of the model it loaded (the patch was only the entry)
    assert len(mm.current_loaded_models) == len(listed)
    assert all(a is b for a, b in zip(listed, mm.current_loaded_models, strict=True))

    # the Stream CLIP class swap of our own clone
    text_encoders = host.pack_module("nodes.host.text_encoders")
    ours = clip.clone()
    cls, fields = type(ours), dict(vars(ours))
    text_encoders._swap_class(ours, text_encoders.StreamedClip(sampling.StreamSettings()))
    installed.append("CLIP.__class__")
    assert type(ours) is not cls and isinstance(getattr(ours, text_encoders.ATTR), text_encoders.StreamedClip)
    theirs = ours.clone()  # a clone of our clone (a LoRA loader's) is streamed too: a swap of its own
    assert type(theirs) is type(ours)
    assert getattr(theirs, text_encoders.ATTR) is getattr(ours, text_encoders.ATTR)
    assert registry.uninstall(prefix=text_encoders.SWAP) == 2
    assert type(ours) is cls and _by_identity(fields, dict(vars(ours))) == []
    assert type(theirs) is cls and not hasattr(theirs, text_encoders.ATTR)

    # the LoRA patch call that reads a disk weight through its file (on the class: process-wide)
    lora_reads = host.pack_module("nodes.host.lora_reads")
    import comfy.model_patcher

    patcher_cls = comfy.model_patcher.ModelPatcher
    registry.uninstall(prefix=lora_reads.NAME)  # (an earlier test's disk tier may have installed it)
    own = dict(vars(patcher_cls))
    assert lora_reads.install() and lora_reads.install()  # once, however often it is asked
    installed.append("patch_weight_to_device")
    assert _by_identity(own, dict(vars(patcher_cls))) == ["patch_weight_to_device"]
    assert registry.uninstall(prefix=lora_reads.NAME) == 1
    assert _by_identity(own, dict(vars(patcher_cls))) == []

    # the watch for clones of a loaded patcher (hosts with patcher callbacks)
    loading = host.pack_module("nodes.host.loading")
    watched = model.clone()

    def callbacks() -> list[tuple[str, Any, int]]:  # every callback, by identity (empty lists aside)
        every = getattr(watched, "callbacks", {})
        return [(kind, key, id(c)) for kind, d in every.items() for key, v in d.items() for c in v]

    listed_callbacks = callbacks()
    handle = loading.ComponentHandle("1:ckpt:model", "model", "model", watched, watched.model, [], "R")
    handle.watch_clones()
    if hasattr(watched, "add_callback"):
        installed.append("ON_CLONE")
        seen = watched.clone()
        assert handle.live_clones() == [seen] and callbacks() != listed_callbacks
        # ours is the newest watch (an earlier test's loaders may still hold theirs: not ours to remove)
        ours = [p for p in registry.patches if p.name == loading.CLONE_WATCH][-1]
        assert registry.uninstall(patch=ours) == 1
    assert callbacks() == listed_callbacks

    # the prompt_id written into a posted prompt (current hosts take it; the 2024 host makes its own)
    routes, state = host.pack_module("nodes.host.routes"), host.pack_module("nodes.host.state")
    posted: dict[str, Any] = {"prompt": copy.deepcopy(PROMPT), "client_id": "patches"}
    before_post = copy.deepcopy(posted)
    assert routes._on_prompt(state.monitor(), posted) is posted
    if not host.legacy:
        installed.append("prompt_id")
        assert set(posted) - set(before_post) == {"prompt_id"}
    registry.uninstall(prefix="server.posted prompt_id")
    assert posted == before_post
    assert installed == (
        ["apply_model", "current_loaded_models", "CLIP.__class__", "patch_weight_to_device"]
        if host.legacy
        else [
            "hold_back",
            "current_loaded_models",
            "CLIP.__class__",
            "patch_weight_to_device",
            "ON_CLONE",
            "prompt_id",
        ]
    )
