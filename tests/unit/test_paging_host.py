"""The 2026 host model (memory/planning/paging_host.py, host_settings.py, host_advice.py): the host's own
formulas, what it uploads from where, what the repeat run reloads, and Headroom's retention."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from comfyui_headroom.cli import main
from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
from comfyui_headroom.memory.planning.host_advice import host_advice, host_report, rerun_nodes
from comfyui_headroom.memory.planning.host_settings import HostSettings, parse_host_flags
from comfyui_headroom.memory.planning.paging_host import paging_host
from comfyui_headroom.memory.planning.workload import Component, Step, Workload
from comfyui_headroom.memory.units import GB, GiB, MiB
from comfyui_headroom.memory.workflow.graph import parse_workflow

HW = Hardware.pcie(4)


def two_experts(te: int = 6 * GiB, expert: int = 12 * GiB) -> Workload:
    """A text encoder, two experts sampling one after the other, a VAE: Wan 2.2's shape."""
    blocks = tuple([expert // 40] * 40)
    comps = (
        Component("te", "te", te, kind="text_encoder"),
        Component("hi", "high", expert, blocks, kind="diffusion_model"),
        Component("lo", "low", expert, blocks, kind="diffusion_model"),
        Component("vae", "vae", 256 * MiB, kind="vae"),
    )
    steps = (
        Step("1", "CLIPTextEncode", ("te",), activation=GiB),
        Step("2", "KSamplerAdvanced", ("hi",), evaluations=10, activation=4 * GiB),
        Step("3", "KSamplerAdvanced", ("lo",), evaluations=10, activation=4 * GiB),
        Step("4", "VAEDecode", ("vae",), activation=2 * GiB),
    )
    return Workload(comps, steps)


def budget(vram_gb: float = 16, ram_gb: float = 32) -> Budget:
    return Budget.from_card(int(vram_gb * GB), int(ram_gb * GB))


# -- the host's own formulas


def test_pinned_cap_reserve_and_cache_headroom_follow_the_host_source() -> None:
    linux, windows = HostSettings(), HostSettings(windows=True)
    ram = 32 * GiB
    assert linux.pinned_cap(ram) == 16 * GiB  # max(0.4R, min(0.9R, R-4G, R+0-16G)) with no swap
    assert linux.with_(swap=16 * GiB).pinned_cap(ram) == 28 * GiB  # R - 4 GiB
    assert windows.pinned_cap(ram) == int(0.4 * ram)
    assert HostSettings(pinned_memory=False).pinned_cap(ram) == 0
    assert linux.reserve(16 * GiB) == 400 * MiB
    assert windows.reserve(16 * GiB) == 700 * MiB and windows.reserve(8 * GiB) == 600 * MiB
    assert HostSettings(reserve_vram=1.5).reserve(16 * GiB) == int(1.5 * GiB)
    assert linux.ram_headroom(ram) == int(3.2 * GiB)  # 10% of RAM, within 2..10 GB
    assert linux.ram_headroom(8 * GiB) == 2 * GiB and linux.ram_headroom(256 * GiB) == 10 * GiB
    assert HostSettings(cache="classic").ram_headroom(ram) == 0
    assert linux.pin_margin(ram) == 2 * GiB  # max(active / 2, 2 GiB)
    assert HostSettings(vram_headroom=2).usable_vram(16 * GiB) == 16 * GiB - 400 * MiB - 2 * GiB


def test_the_hosts_flags_parse_as_the_host_reads_them() -> None:
    s = parse_host_flags("--listen 0.0.0.0 --high-ram --reserve-vram 1 --vram-headroom 2 --fast-disk")
    assert s.high_ram and s.cache == "classic" and s.fast_disk  # --high-ram implies --cache-classic
    assert s.reserve_vram == 1 and s.vram_headroom == 2
    assert s.flags() == ["--fast-disk", "--high-ram", "--reserve-vram 1", "--vram-headroom 2"]
    assert parse_host_flags("--cache-ram 4 64").cache_ram == (4.0, 64.0)
    assert not parse_host_flags("--disable-dynamic-vram").paging
    assert not parse_host_flags("--cpu").dynamic_vram
    with pytest.raises(ValueError):
        HostSettings(cache="mru")


# -- the paging host


def test_first_run_pins_on_the_way_and_streams_what_the_activations_leave() -> None:
    o = paging_host(two_experts(), budget(), HW)
    hi = next(n for n in o.run(1) if n.node_id == "2")
    assert hi.disk_read == 12 * GiB  # read from the file once, into its host buffer
    assert hi.streamed > 0 and hi.vram_weights + hi.streamed == 12 * GiB
    assert sum(hi.uploads.values()) == pytest.approx(12 * GiB + 9 * hi.streamed, rel=1e-6)
    assert o.fits


def test_fast_disk_uploads_from_the_file_at_every_pass_and_pins_nothing() -> None:
    o = paging_host(two_experts(), budget(), HW, HostSettings(fast_disk=True))
    assert o.ram_peak == 0
    hi = next(n for n in o.run(1) if n.node_id == "2")
    assert set(hi.uploads) == {"disk"} and hi.disk_read == sum(hi.uploads.values())


def test_repeat_run_under_the_ram_pressure_cache_reloads_and_retention_keeps_what_the_budget_holds() -> None:
    w, b = two_experts(), budget()
    host = paging_host(w, b, HW)
    # the text encoder's node is cached in the repeat run; the experts' pins did not all survive run 1
    assert [n.node_id for n in host.run(2)] == ["2", "3", "4"]
    assert host.reloads, "the plan predicts the host's reload"
    kept = paging_host(w, b, HW, headroom=True)
    # what the budget holds: the two experts and the VAE beside the host's free-RAM floor
    holds = 2 * 12 * GiB + 256 * MiB <= b.ram - HostSettings().ram_headroom(b.ram)
    assert holds
    assert kept.reloads == {}
    assert kept.runs_s[1] < host.runs_s[1]
    # and the text encoder's pins went back as soon as its last use passed
    encode = next(n for n in kept.run(1) if n.node_id == "1")
    assert encode.freed_ram.get("te") == 6 * GiB


def test_classic_cache_keeps_pins_the_ram_pressure_cache_frees() -> None:
    w, b = two_experts(), budget()
    ram = paging_host(w, b, HW)
    classic = paging_host(w, b, HW, HostSettings(cache="classic"))
    assert sum(classic.reloads.values()) <= sum(ram.reloads.values())


def test_settings_lines_carry_their_figures() -> None:
    lines = host_advice(two_experts(), budget(), HW, HostSettings())
    settings = [a.setting for a in lines]
    assert {"--high-ram", "--fast-disk", "--vram-headroom", "--reserve-vram", "pinned cap"} <= set(settings)
    for a in lines:
        assert any(ch.isdigit() for ch in a.line), a.line
    retention = next(a for a in lines if a.setting == "Headroom retention")
    assert retention.seconds > 0 and "reloads nothing" in retention.line
    assert retention.line.endswith(f"saves {retention.seconds:.1f} s per run")  # in words, as the others
    off = host_advice(two_experts(), budget(), HW, HostSettings(host="0.3"))
    assert [a.verdict for a in off] == ["info"]


def test_rerun_nodes_are_the_seeded_nodes_and_their_descendants() -> None:
    prompt = {
        "1": {"class_type": "CLIPTextEncode", "inputs": {"text": "a", "clip": ["9", 0]}},
        "9": {"class_type": "CLIPLoader", "inputs": {"clip_name": "t.safetensors", "type": "wan"}},
        "2": {"class_type": "KSampler", "inputs": {"seed": 1, "positive": ["1", 0]}},
        "3": {"class_type": "VAEDecode", "inputs": {"samples": ["2", 0]}},
    }
    assert rerun_nodes(parse_workflow(prompt), ["9", "1", "2", "3"]) == {"2", "3"}


def test_host_report_has_both_baselines() -> None:
    hosts, advice = host_report(two_experts(), budget(), HW, HostSettings())
    assert set(hosts) == {"comfyui", "comfyui_2026"} and advice


# -- the done-when: the official Wan 2.2 14B t2v template at 16 GB / 32 GB


def _template(name: str) -> Path | None:
    try:
        import comfyui_workflow_templates_json as package
    except ImportError:
        return None
    path = Path(package.__file__).parent / "templates" / name
    return path if path.exists() else None


WAN = _template("video_wan2_2_14B_t2v.json")


@pytest.mark.skipif(WAN is None, reason="pip install comfyui-workflow-templates-json")
def test_plan_on_the_wan_template_prints_both_hosts_and_settings_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["plan", str(WAN), "--vram", "16GB", "--ram", "32GB"]
    main(args)
    text = capsys.readouterr().out
    assert "ComfyUI 0.3.x: transfer" in text and "ComfyUI 2026: transfer" in text
    assert "host settings for ComfyUI 2026" in text and "--cache-classic" in text
    main([*args, "--json"])
    data = json.loads(capsys.readouterr().out)["hosts"]
    assert set(data["baselines"]) == {"comfyui", "comfyui_2026"}
    assert data["baselines"]["comfyui_2026"]["runs_s"][1] > 0
    assert any(
        a["setting"] == "--cache-classic" and any(c.isdigit() for c in a["line"]) for a in data["advice"]
    )
    main([*args, "--cache-classic", "--json"])
    data = json.loads(capsys.readouterr().out)["hosts"]
    assert data["settings"]["flags"] == ["--cache-classic"]
    assert any(a["setting"] == "--cache-ram" for a in data["advice"])


# -- the running host, the preflight and the Monitor


def test_the_running_hosts_flags_are_read_from_its_cli_args(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse
    import sys
    from types import SimpleNamespace

    from comfyui_headroom.nodes.host import host_flags

    args = argparse.Namespace(
        cache_classic=True, high_ram=False, reserve_vram=1.0, vram_headroom=0, fast_disk=False
    )
    monkeypatch.setitem(sys.modules, "comfy.cli_args", SimpleNamespace(args=args))
    monkeypatch.setitem(sys.modules, "comfyui_version", SimpleNamespace(__version__="0.33.0"))
    monkeypatch.setitem(sys.modules, "comfy.memory_management", SimpleNamespace(aimdo_enabled=True))
    s = host_flags.running_host_settings()
    assert (
        s is not None
        and s.version == "0.33.0"
        and s.paging
        and s.flags() == ["--cache-classic", "--reserve-vram 1"]
    )
    monkeypatch.setitem(sys.modules, "comfy.memory_management", SimpleNamespace(aimdo_enabled=False))  # a CPU
    off = host_flags.running_host_settings()
    assert off is not None and not off.paging
    assert not s.fast_disk_auto  # 0.33 has no automatic fast-disk
    monkeypatch.setitem(sys.modules, "comfyui_version", SimpleNamespace(__version__="0.38.0"))
    monkeypatch.setitem(sys.modules, "comfy.memory_management", SimpleNamespace(aimdo_enabled=True))
    new = host_flags.running_host_settings()
    assert new is not None and new.fast_disk_auto and "fast-disk auto-detected: assumed off" in new.describe()
    # the opt-out is the line a 0.37+ host gets where fast-disk would cost (two experts read per pass)
    lines = {a.setting: a for a in host_advice(two_experts(), budget(), HW, new)}
    assert lines["--disable-fast-disk"].verdict == "use" and lines["--disable-fast-disk"].seconds > 0
    args.disable_fast_disk = True
    assert not host_flags.running_host_settings().fast_disk_auto
    monkeypatch.setitem(sys.modules, "comfyui_version", SimpleNamespace(__version__="0.3.64"))
    old = host_flags.running_host_settings()
    assert old is not None and old.host == "0.3"


def test_the_comfy_compiler_is_read_from_the_running_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """On where the host has the flag (0.35 on), DynamicVRAM runs and comfy-aimdo has the recorder (0.5 on);
    off by --disable-comfy-compiler; not there on 0.33 (no flag), with aimdo 0.4 or without DynamicVRAM."""
    import argparse
    import sys
    from types import SimpleNamespace

    from comfyui_headroom.nodes.host import host_flags

    args = argparse.Namespace(disable_comfy_compiler=False)
    monkeypatch.setitem(sys.modules, "comfy.cli_args", SimpleNamespace(args=args))
    monkeypatch.setitem(sys.modules, "comfyui_version", SimpleNamespace(__version__="0.38.0"))
    monkeypatch.setitem(sys.modules, "comfy.memory_management", SimpleNamespace(aimdo_enabled=True))
    monkeypatch.setitem(sys.modules, "comfy_aimdo.control", SimpleNamespace(record=lambda stream: None))
    on = host_flags.running_host_settings()
    assert on is not None and on.comfy_compiler is True and "--disable-comfy-compiler" not in on.flags()
    line = on.describe()  # (0.38 also says its fast-disk detection)
    assert line.startswith("ComfyUI 2026 0.38.0 (DynamicVRAM, ram cache, ")
    assert line.endswith("Comfy Compiler)")
    args.disable_comfy_compiler = True
    off = host_flags.running_host_settings()
    assert off is not None and off.comfy_compiler is False and "--disable-comfy-compiler" in off.flags()
    assert "Comfy Compiler)" not in off.describe() and off.describe().endswith("--disable-comfy-compiler")
    args.disable_comfy_compiler = False
    monkeypatch.setitem(sys.modules, "comfy_aimdo.control", SimpleNamespace())  # comfy-aimdo 0.4: no recorder
    assert host_flags.running_host_settings().comfy_compiler is None
    monkeypatch.setitem(sys.modules, "comfy_aimdo.control", SimpleNamespace(record=lambda stream: None))
    monkeypatch.setitem(sys.modules, "comfy.memory_management", SimpleNamespace(aimdo_enabled=False))
    assert host_flags.running_host_settings().comfy_compiler is None  # no DynamicVRAM: nothing compiles
    monkeypatch.setitem(sys.modules, "comfy.memory_management", SimpleNamespace(aimdo_enabled=True))
    monkeypatch.setitem(sys.modules, "comfy.cli_args", SimpleNamespace(args=argparse.Namespace()))  # 0.33
    assert host_flags.running_host_settings().comfy_compiler is None
    assert parse_host_flags("--cache-classic").comfy_compiler is None  # the command line does not know


def test_the_preflight_verdict_and_the_monitor_carry_the_host_settings() -> None:
    from comfyui_headroom.memory.planning.preflight import plan_prompt
    from comfyui_headroom.memory.telemetry.probe import Sample
    from comfyui_headroom.memory.telemetry.report import text_report
    from comfyui_headroom.memory.telemetry.runs import RunRecord

    prompt = json.loads(
        (Path(__file__).parents[2] / "example_workflows" / "api" / "Flux Dev text to image.json").read_text()
    )
    planned, verdict = plan_prompt(prompt, budget(12, 32), HW, host=HostSettings(cache="classic"))
    assert verdict.host is not None and "--cache-classic" in verdict.host["flags"]
    assert any("--cache-ram" in line for line in verdict.host["advice"])
    run = RunRecord("p", "k", 0.0, planned=planned)
    text = text_report(run, Sample(t=0.0), {})
    assert "host: ComfyUI 2026" in text and verdict.host["advice"][0] in text


def test_the_reactive_hosts_repeat_run_keeps_its_models_in_ram_and_rereads_what_ram_cannot_hold() -> None:
    from comfyui_headroom.memory.planning.host_advice import reactive_host

    roomy = reactive_host(two_experts(), budget(16, 64), HW)
    assert roomy.transfer_s == pytest.approx(comfyui_reactive_s(budget(16, 64)))  # run 1: the baseline
    assert [n.node_id for n in roomy.run(2)] == ["2", "3", "4"] and roomy.reloads == {}
    assert all(set(n.uploads) <= {"pageable"} for n in roomy.run(2))  # from its RAM copy
    tight = reactive_host(two_experts(), budget(16, 24), HW)
    assert tight.reloads and tight.runs_s[1] > roomy.runs_s[1]  # 30 GiB of weights in 24 GB: paged from files


def comfyui_reactive_s(b: Budget) -> float:
    from comfyui_headroom.memory.planning.baselines import comfyui_reactive

    return comfyui_reactive(two_experts(), b, HW).transfer_s


def test_m14_a_cpu_server_is_not_said_to_run_with_disable_dynamic_vram() -> None:
    import argparse

    from comfyui_headroom.memory.planning.host_settings import settings_from_args

    cpu = settings_from_args(argparse.Namespace(cpu=True))
    assert cpu.describe() == "ComfyUI 2026 (DynamicVRAM off: --cpu, ram cache)" and cpu.flags() == []
    flag = settings_from_args(argparse.Namespace(disable_dynamic_vram=True))
    assert flag.describe() == "ComfyUI 2026 (DynamicVRAM off, ram cache) with --disable-dynamic-vram"
    # the settings line under it (VRAM Stats, the Monitor) says what turned it off, never the flag
    [line] = host_advice(two_experts(), budget(), HW, cpu)
    assert line.line.startswith("DynamicVRAM off (--cpu):"), line
    assert "--disable-dynamic-vram" not in line.line, line
    [line] = host_advice(two_experts(), budget(), HW, flag)
    assert line.line.startswith("DynamicVRAM off (--disable-dynamic-vram):"), line
