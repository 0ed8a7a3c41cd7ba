"""Issue #40 item 9: one home for process-wide state, made new in one call.

Every module-level object of memory/ and nodes/ that changes at run time is declared in
``memory.process_state.PROCESS`` (or listed below, with why it is not state); ``reset_process_state()``
makes all of them new, the host's hooks re-armed; docs/architecture.md lists every one."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import threading
from pathlib import Path
from types import ModuleType

import pytest

from comfyui_headroom import memory, nodes
from comfyui_headroom.memory.process_state import PROCESS, ProcessState
from comfyui_headroom.memory.residency.ram_budget import RAM
from comfyui_headroom.memory.telemetry.probe import PINNED
from comfyui_headroom.nodes import host
from comfyui_headroom.nodes.host import legacy_2024, recording, sampling, state, text_encoders, vae_plan
from headroom_testing.module_state import module_state

ROOT = Path(__file__).resolve().parents[2]

# module-level objects that look like state and are not: each with why
NOT_STATE = {
    "memory.deadline:_DEADLINE": "a ContextVar: its value is per thread and context, never process-wide",
    "memory.process_state:PROCESS": "the registry itself",
    "memory.planning.activations:UNKNOWN_DIFFUSION": "a frozen dataclass constant",
    "memory.planning.compute:UNKNOWN_ARCH": "a frozen dataclass constant",
    "memory.planning.gpus:MODEL": "a frozen dataclass constant (the fitted time model)",
    "memory.planning.latents:DEFAULT_SHAPE": "a frozen dataclass constant",
    "memory.planning.latents:AUDIO_SHAPE": "a frozen dataclass constant",
    "nodes.common:RESIDENCY_CHOICES": "a list built once from constants, never changed",
    "nodes.common:ANY": "the host's wildcard type marker, a str subclass",
    "nodes.host.lookups:HOST_MODEL_FILES": "stateless: asks the host's folder_paths on every call",
    "nodes.host.node_text:_monitor": "wiring made once at import (state.py connects the monitor getter)",
    "nodes.host.state:name": "_process_wide's globals()[name]: the three held as 'host.state: ...'",
    "nodes.host.state:_MONITOR": "held as 'host.state: monitor, controller, event source'",
    "nodes.host.state:_RESIDENCY": "held as 'host.state: monitor, controller, event source'",
    "nodes.host.state:_EVENTS": "held as 'host.state: monitor, controller, event source'",
    # caches of pure functions: the same answer for the same arguments for the life of the process
    "memory.models.catalog:catalog": "the pack's own catalog file, read once",
    "memory.models.catalog:_normalised_index": "derived from the catalog file",
    "memory.models.catalog:_catalog_components": "derived from the catalog file",
    "memory.models.catalog:_describe_cached": "derived from the catalog file",
    "memory.models.catalog:_catalog_by_family_cached": "derived from the catalog file",
    "memory.models.layouts:_split_numbered": "a pure function of a key name",
    "memory.models.layouts:_list_indices": "a pure function of a key list",
    "memory.optional:optional_module": "whether an optional package imports: fixed for the process",
    "memory.planning.gpus:_index": "derived from the GPU table",
    "memory.planning.gpus:measured_efficiency": "the pack's measured-efficiency file, read once",
    "memory.planning.remedies:_urls": "the pack's model URL file, read once",
    "memory.residency.ram_budget:_libc": "the C library handle",
    "memory.tiled_vae.groupnorm:addcmul_is_fma": "a property of this CPU's kernels",
    "memory.workflow.node_types:_table": "the pack's node-type file, read once",
}


def _modules() -> list[Path]:
    return sorted(p for d in ("memory", "nodes") for p in (ROOT / d).rglob("*.py"))


def _key(path: Path, name: str) -> str:
    return f"{path.relative_to(ROOT).with_suffix('').as_posix().replace('/', '.')}:{name}"


def test_every_object_that_changes_at_run_time_is_held_in_one_registry() -> None:
    found = {_key(p, f.name): f.kind for p in _modules() for f in module_state(p.read_text())}
    undeclared = {k: v for k, v in found.items() if k not in NOT_STATE}
    assert not undeclared, (
        f"hold these in memory.process_state.PROCESS (or say why they are not state): {undeclared}"
    )
    assert not set(NOT_STATE) - set(found), (
        "listed as not state but no longer found: drop them from NOT_STATE"
    )


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("_SEEN = set()\ndef f(x):\n    _SEEN.add(x)\n", "made by a call"),
        ("_SEEN = {}\ndef f(x):\n    _SEEN[x] = 1\n", "mutated container"),
        ("_N = None\ndef f():\n    global _N\n    _N = 1\n", "rebound with global"),
        ("import functools\n@functools.lru_cache(8)\ndef f(x):\n    return x\n", "cached function"),
    ],
)
def test_the_scan_finds_each_kind_of_state(source: str, kind: str) -> None:
    assert [f.kind for f in module_state(source)] == [kind]
    held = source.replace("set()", 'PROCESS.hold("n", set(), "why")').replace(
        "= {}", '= PROCESS.hold("n", {}, "w")'
    )
    if kind in ("made by a call", "mutated container"):
        assert module_state(held) == []  # declared: not reported
    assert module_state("_TABLE = {'a': 1}\ndef f():\n    return _TABLE['a']\n") == []  # a constant


def _import_all() -> list[str]:
    names = []
    for package in (memory, nodes):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(info.name)
            names.append(info.name)
    return names


def test_every_held_object_is_in_the_module_map_with_its_reason() -> None:
    _import_all()
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = [h.name for h in PROCESS.held() if f"`{h.name}`" not in text]
    assert not missing, f"docs/architecture.md's process-wide state table lacks {missing}"
    assert len(PROCESS.held()) >= 16


def test_one_call_makes_every_resettable_object_new(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "comfy.model_management", raising=False)
    host.reset_process_state(rearm=False)
    m = state.monitor()
    old_events = state.events()
    m.pool.submit(lambda: None).result(30)  # the planning worker runs
    worker = m.pool._thread
    RAM.configure("3GB")
    PINNED.set("test", 4096)
    recording._told.add("said")
    vae_plan._built[("f", 1, 2)] = "engine"
    sampling._ACTIVE[1] = object()  # type: ignore[assignment]
    text_encoders._ACTIVE[2] = object()  # type: ignore[assignment]
    legacy_2024._SCOPES.at_end((None, "7"), lambda: None)

    names = host.reset_process_state(rearm=False)

    assert (
        "host.state: monitor, controller, event source" in names
        and "host.patches: patch registry" not in names
    )
    assert state._MONITOR is None and state.monitor() is not m and state.events() is not old_events
    assert worker is not None
    worker.join(10)
    assert not worker.is_alive()  # the old monitor's planning worker stopped
    assert RAM.setting is None and PINNED.total == 0 and not recording._told and not vae_plan._built
    assert not sampling._ACTIVE and not text_encoders._ACTIVE and not legacy_2024._SCOPES._ends
    host.reset_process_state(rearm=False)


def test_the_host_hooks_come_off_and_go_back_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The event source's executor hooks hold it: a reset takes them off, and puts them back on the new
    one (rearm) or leaves them off."""
    execution = ModuleType("execution")
    monkeypatch.setitem(sys.modules, "execution", execution)
    monkeypatch.setitem(sys.modules, "nodes", ModuleType("nodes"))
    monkeypatch.setenv("HEADROOM_MONITOR", "0")
    host.reset_process_state(rearm=False)
    host.install_monitor()
    first = state.events()
    assert state.running_hooks()[0]
    host.reset_process_state()
    assert state._EVENTS is not None and state._EVENTS is not first and state.running_hooks()[0]
    host.reset_process_state(rearm=False)
    assert state._EVENTS is None and not state.running_hooks()[0]


def test_a_reset_that_fails_logs_and_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    registry, calls = ProcessState(), []
    registry.hold("a", 1, "why", reset=lambda: 1 / 0)
    registry.hold("b", 2, "why", reset=lambda: calls.append("b"))
    registry.hold("c", threading.Lock(), "kept: why")
    assert registry.reset() == ["b"] and calls == ["b"]
    assert "could not reset a" in caplog.text
    with pytest.raises(ValueError):
        registry.hold("", 1, "")
