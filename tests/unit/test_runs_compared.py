"""memory/telemetry/compare.py: a run against its workflow's previous run (#42, "runs compared")."""

from __future__ import annotations

from comfyui_headroom.memory.planning.records import PlannedRun
from comfyui_headroom.memory.telemetry.compare import compare_runs, previous_run
from comfyui_headroom.memory.telemetry.probe import Sample
from comfyui_headroom.memory.telemetry.report import report_json, text_report
from comfyui_headroom.memory.telemetry.runs import NodeRecord, ResidencyEvent, RunRecord

GiB = 2**30


def _run(
    pid: str, workflow: str | None, rss: int, vram: int, loads: dict[str, int], read: int = 0
) -> RunRecord:
    run = RunRecord(pid, key="k", started=0.0, workflow_id=workflow)
    node = NodeRecord("4", "CheckpointLoaderSimple", 0.0, finished=1.0, status="done")
    node.after = {"rss": rss, "device_used": vram}
    node.io = {"proc_read": read}
    run.nodes["4"] = node
    for component, nbytes in loads.items():
        run.events.append(ResidencyEvent(0.5, pid, "4", component, "disk", "ram", nbytes, "load"))
    return run


def test_the_previous_run_is_the_same_workflows() -> None:
    a, b, c = _run("a", "w1", 0, 0, {}), _run("b", "w2", 0, 0, {}), _run("c", "w1", 0, 0, {})
    assert previous_run([a, b, c], c) is a and previous_run([a, b, c], a) is None
    assert previous_run([a, b, c], b) is None


def test_a_second_run_says_what_it_read_again_and_who_holds_the_growth() -> None:
    first = _run("a", "w", rss=4 * GiB, vram=GiB, loads={"sdxl [diffusion_model]": 5 * GiB})
    second = _run(
        "b", "w", rss=9 * GiB, vram=GiB, loads={"sdxl [diffusion_model]": 5 * GiB, "clip_l [te]": GiB}
    )
    second.events[1] = ResidencyEvent(0.6, "b", "4", "clip_l [te]", "disk", "pinned", 6 * GiB, "load")
    host = {"settings": "ComfyUI 2026 (DynamicVRAM, ram cache)", "reloads": {"sdxl": 5 * GiB}, "advice": []}
    second.planned = PlannedRun(
        fits=True, nodes=(), budget_vram=GiB, min_vram=GiB, plan={}, preflight={"host": host}
    )  # fmt: skip
    out = compare_runs(first, second)
    assert out["previous"] == "a" and out["ram_change"] == 5 * GiB and out["vram_change"] == 0
    assert out["holder"] == "clip_l [te]"
    text = "\n".join(out["lines"])
    assert "read from disk again: clip_l [te] 6.00 GiB, sdxl [diffusion_model] 5.00 GiB" in text
    assert "as its plan predicted" in text and "DynamicVRAM" in text
    assert "RAM (process) +5.00 GiB at the end; VRAM +0.00 GiB at the end; held by clip_l [te]" in text
    assert "host settings: ComfyUI 2026 (DynamicVRAM, ram cache)" in text
    assert report_json(second, None, first)["compared"] == out
    assert "since the last run of this workflow:\n  read from disk again" in text_report(
        second, _sample(), {}, "4", compared=out["lines"]
    )


def test_the_first_run_and_unmeasured_figures_say_so() -> None:
    run = _run("a", None, 0, 0, {})
    assert compare_runs(None, run)["lines"] == ["first run of this workflow here: nothing to compare with"]
    later = _run("b", None, 0, 0, {})
    later.nodes["4"].after = {}
    out = compare_runs(run, later)
    assert out["ram_change"] is None and "RAM (process): not measured; VRAM: not measured" in out["lines"][-1]
    assert "no model was loaded from disk again" in out["lines"][0]


def _sample() -> Sample:
    return Sample(t=0.0)
