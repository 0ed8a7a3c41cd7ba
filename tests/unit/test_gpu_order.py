"""scripts/gpu-check's order of value and budget (scripts/gpu_order.py, issue #41), on the CPU: the steps
run in the declared order, the first host's first; they are packed into device calls by their expected
seconds, the first call on the 2026 host within one command's 600 s; --from resumes at a step; every
step's results are written, and copied to $OUT, as soon as it ends; a rehearsal runs each benchmark's
CPU mode with its GPU outputs."""

from __future__ import annotations

import json
import os
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_gpu_hosts import fake_host, load  # noqa: E402


def step(name: str, timeout: int = 600, kind: str = "bench") -> SimpleNamespace:
    fields = {"skip": None, "host_rank": 0, "deselected": False, "expected": 0, "measured": False}
    return SimpleNamespace(name=name, kind=kind, timeout=timeout, argv=["py"], notes=[], **fields)


def device_steps(tmp_path: Path):  # noqa: ANN201
    """The steps on the 2026 host in both modes, then a 0.3.64 host, as the device's run sees them."""
    gc = load("gpu_check")
    runs = gc.gpu_hosts.host_runs(
        f"{fake_host(tmp_path, '0.33.0', True)},{fake_host(tmp_path, '0.3.64', False)}"
    )
    steps = gc.gpu_order.ordered(gc.per_host(gc.discover(tmp_path), runs))
    for s in steps:
        s.expected, s.measured = gc.gpu_order.expected(s.name, s.kind)
    return gc, steps


def test_every_ranked_step_and_rehearsal_is_a_file_of_the_repository() -> None:
    order = load("gpu_order")
    for rank in order.ORDER:
        assert (ROOT / rank.file).is_file(), rank.file
        assert rank.mode in ("on", "off", "*") and 0 < rank.seconds <= 600
    assert all((ROOT / name).is_file() for name in order.REHEARSE)
    assert len({(r.file, r.mode) for r in order.ORDER}) == len(order.ORDER), "a step ranked twice"


def test_measured_seconds_are_the_h200_runs_longest(tmp_path: Path) -> None:
    """A rank marked measured carries the longest time its step (file and DynamicVRAM mode) took in a row
    of bench/results/gpu-check.md that ran it to its end: a GPU test file, passed or failed (pytest runs
    every test). No benchmark ran to its end there (each FAIL stopped early; the one ok, gguf_stream,
    found no gguf package and exited), so each benchmark's rank is an estimate."""
    order = load("gpu_order")
    took: dict[tuple[str, str], list[int]] = {}
    for line in (ROOT / "bench" / "results" / "gpu-check.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 7 or not cells[2].startswith("`") or not cells[5].isdigit():
            continue
        if cells[3].startswith(("ok", "FAIL")) and cells[2].startswith("`tests/gpu/"):
            name = cells[2].strip("`").replace(", DynamicVRAM on", " (DynamicVRAM on)")
            name = name.replace(", --disable-dynamic-vram", " (--disable-dynamic-vram)")
            took.setdefault((order.file_of(name), order.mode_of(name)), []).append(int(cells[5]))
    for rank in order.ORDER:
        seen = took.get((rank.file, rank.mode), [])
        assert rank.measured == bool(seen), (rank, seen)
        assert not seen or rank.seconds == max(seen), (rank, seen)


def test_steps_run_by_host_then_by_value_then_as_found(tmp_path: Path) -> None:
    _, steps = device_steps(tmp_path)
    names = [s.name for s in steps]
    on, off = "0.33.0 (DynamicVRAM on)", "0.33.0 (--disable-dynamic-vram)"
    assert names[:5] == [
        f"tests/gpu/test_residency_gpu.py @ {off}",
        f"tests/gpu/test_residency_gpu.py @ {on}",
        f"tests/gpu/test_tiled_vae_gpu.py @ {on}",
        f"tests/gpu/test_bound_gauges_gpu.py @ {on}",
        f"bench/activations_gpu.py @ {on}",
    ]
    assert names[5] == f"tests/gpu/test_aimdo_hooks_gpu.py @ {on}"  # #40: aimdo 0.6's page-outs
    assert names[6:9] == [f"bench/residency_gpu.py @ {off}", f"bench/residency_gpu.py @ {on}",
                          f"bench/host_repeat_gpu.py @ {on}"]  # fmt: skip
    first_064 = min(i for i, n in enumerate(names) if n.endswith("@ 0.3.64"))
    assert all("0.3.64" not in n for n in names[:first_064]) and all(
        "@ 0.3.64" in n or " @ " not in n for n in names[first_064:]
    ), "the second host's steps follow all of the first host's"
    assert len(names) == len(set(names))


def test_unranked_steps_follow_the_ranked_in_the_order_found() -> None:
    order = load("gpu_order")
    found = [step("bench/zzz_gpu.py"), step("bench/streaming_gpu.py"), step("bench/aaa_gpu.py"),
             step("tests/gpu/test_residency_gpu.py", kind="pytest")]  # fmt: skip
    names = [s.name for s in order.ordered(found)]
    assert names == ["tests/gpu/test_residency_gpu.py", "bench/streaming_gpu.py", "bench/zzz_gpu.py",
                     "bench/aaa_gpu.py"]  # fmt: skip
    assert order.expected("bench/zzz_gpu.py", "bench") == (order.DEFAULT_BENCH_EXPECTED, False)
    assert order.expected("tests/gpu/test_residency_gpu.py @ 0.33.0 (DynamicVRAM on)", "pytest") == (25, True)


@pytest.mark.parametrize("budget", [100, 570, 5000])
def test_calls_cover_every_selected_step_once_in_order_within_the_budget(budget: int) -> None:
    order = load("gpu_order")
    costs = [420, 25, 240, 300, 700, 33, 60, 360, 9, 120, 300, 7]
    steps = [step(f"s{i}", timeout=c) for i, c in enumerate(costs)]  # unranked: min(120, timeout) each
    steps[3].deselected = True  # --only left it out: in no call
    steps[5].skip = "no CUDA device (torch ...)"  # this machine's lack: keeps its call
    calls = order.calls(steps, budget)
    assert calls[3] == 0 and all(c > 0 for i, c in enumerate(calls) if i != 3)
    kept = [c for c in calls if c]
    assert kept == sorted(kept) and set(kept) == set(range(1, max(kept) + 1)), "consecutive, in order"
    for k in range(1, max(kept) + 1):
        cost = [order.seconds(s) for s, c in zip(steps, calls, strict=True) if c == k]
        assert sum(cost) <= budget or len(cost) == 1, (k, cost)
        nxt = next((order.seconds(s) for s, c in zip(steps, calls, strict=True) if c == k + 1), None)
        assert nxt is None or sum(cost) + nxt > budget, "packed as it goes"


def test_the_first_device_call_fits_one_command_and_measures_the_most_valuable(tmp_path: Path) -> None:
    gc, steps = device_steps(tmp_path)
    calls = gc.gpu_order.calls(steps, gc.gpu_order.CALL_BUDGET)
    first = [s for s, c in zip(steps, calls, strict=True) if c == 1]
    assert sum(gc.gpu_order.seconds(s) for s in first) <= gc.gpu_order.CALL_BUDGET <= 600 - 30
    files = {gc.gpu_order.file_of(s.name) for s in first}
    assert {"tests/gpu/test_residency_gpu.py", "bench/residency_gpu.py", "bench/host_repeat_gpu.py"} <= files
    lines = gc.gpu_order.dry_run(steps, gc.gpu_order.CALL_BUDGET)
    assert lines[-len(set(calls)) :][0].startswith("device call 1: ")
    assert any(line.startswith("not in the runbook: 8. recovery from an OOM") for line in lines)


def test_a_part_is_one_device_calls_steps(tmp_path: Path) -> None:
    gc, steps = device_steps(tmp_path)
    calls = gc.gpu_order.calls(steps, 570)
    parts = gc.gpu_order.split(steps, 2, 570)
    assert parts == max(calls)
    assert [s.skip is None for s in steps] == [c == 2 for c in calls]
    with pytest.raises(ValueError, match="there are"):
        gc.gpu_order.split(steps, parts + 1, 570)


def test_from_resumes_at_a_step_by_number_or_name(tmp_path: Path) -> None:
    gc, steps = device_steps(tmp_path)
    gc.gpu_order.start_from(steps, "bench/residency_gpu.py")
    assert [s.deselected for s in steps[:7]] == [True] * 6 + [False]
    assert steps[0].skip == "before --from bench/residency_gpu.py"
    assert gc.gpu_order.from_step(steps, "3") == 2
    for bad in ("0", str(len(steps) + 1), "no-such-step"):
        with pytest.raises(ValueError, match="--from"):
            gc.gpu_order.from_step(steps, bad)
    calls = gc.gpu_order.calls(steps, 570)
    assert calls[:6] == [0] * 6 and calls[6] == 1, "the resumed run's first call starts at --from"


def test_every_step_is_written_and_copied_when_it_ends_and_the_resume_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The device tool returns what is under $OUT even when it cuts the call off: after the first step
    (its table in bench/results-like files) and before the second ends, $OUT holds the first's results."""
    gc = load("gpu_check")
    results, out = tmp_path / "results", tmp_path / "out"
    table = results / "first.md"
    code = f"import pathlib; pathlib.Path({str(table)!r}).write_text('| a table |')"
    first = gc.Step("bench/first_gpu.py", "bench", [sys.executable, "-c", code], 60, "first.md",
                    outputs=[table])  # fmt: skip
    seen: dict[str, list[str]] = {}
    peek = f"import tarfile; print(tarfile.open({str(out / 'gpu-check-results.tgz')!r}).getnames())"
    second = gc.Step("bench/second_gpu.py", "bench", [sys.executable, "-c", peek], 60, "-")
    third = gc.Step("bench/third_gpu.py", "bench", [sys.executable, "-c", "pass"], 60, "-", expected=9999)
    monkeypatch.setattr(gc, "discover", lambda results, rehearse=False: [first, second, third])
    monkeypatch.setattr(gc, "plan", lambda steps, only, wheels, rehearse=False: ("a host", None))
    monkeypatch.setattr(gc, "install", lambda wheels, dry: [])
    assert gc.main(["--results-dir", str(results), "--budget", "120", "--copy-to", str(out)]) == 0
    seen["during second"] = second.tail
    assert any("first.md" in line for line in seen["during second"]), "the first's table was out already"
    summary = (out / "gpu-check.md").read_text()
    assert "| 1 | `bench/first_gpu.py` | ok | 0 |" in summary
    assert "| 3 | `bench/third_gpu.py` | skipped: budget of 120 s used up" in summary
    assert "--from 3` (step 3, `bench/third_gpu.py`)" in summary
    with tarfile.open(out / "gpu-check-results.tgz") as tar:
        names = tar.getnames()
    assert "bench/results/first.md" in names and "bench/results/gpu-check.md" in names


def test_a_rehearsal_runs_each_benchmark_in_its_cpu_mode_with_its_gpu_outputs(tmp_path: Path) -> None:
    gc = load("gpu_check")
    by_name = {s.name: s for s in gc.discover(tmp_path, rehearse=True)}
    tiled = by_name["bench/tiled_vae.py"].argv
    assert tiled[2:6] == ["--vaes", "sd", "--sizes", "tiny"] and "realistic" not in tiled
    assert tiled[-2:] == ["--out", f"{tmp_path}/tiled_vae_gpu.md"]
    throughput = by_name["bench/gpu_throughput_gpu.py"].argv
    assert "--quick" in throughput and "--json" in throughput
    assert by_name["bench/gpu_throughput_gpu.py"].outputs[-1] == tmp_path / "gpu_throughput.json"
    assert by_name["bench/streaming_gpu.py"].argv[2:] == ["--out", f"{tmp_path}/streaming_gpu.md"]


def test_the_throughput_figures_merge_into_the_planners_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runbook merges bench/gpu_throughput_gpu.py's JSON with scripts/gpu_efficiency.py as soon as
    the step ends; a rehearsal merges the CPU's figures, named as the card, into a scratch table only."""
    gc = load("gpu_check")
    figures = tmp_path / "gpu_throughput.json"
    best = {"bf16_matmul": 400.0, "bf16_attention": 250.0}
    figures.write_text(json.dumps({"device": "cpu", "best_tflops": best}))
    monkeypatch.setattr(gc, "EFFICIENCY", tmp_path / "table.json")
    done = gc.Step("bench/gpu_throughput_gpu.py", "bench", ["py"], 60, "-", rc=0, outputs=[figures])
    env = dict(os.environ)
    with (tmp_path / "log").open("w") as log:
        written = gc.after_step(done, True, env, log)  # a rehearsal: the CPU's figures as the card's
        assert written == [tmp_path / "gpu_efficiency.json"] and not (tmp_path / "table.json").exists()
        assert list(json.loads(written[0].read_text())["cards"]) == ["H200"]
        figures.write_text(json.dumps({"device": "NVIDIA H200", "best_tflops": best}))
        assert gc.after_step(done, False, env, log) == [tmp_path / "table.json"]
        assert list(json.loads((tmp_path / "table.json").read_text())["cards"]) == ["H200"]
        figures.write_text(json.dumps({"device": "cpu", "best_tflops": best}))  # not a card: said, not lost
        assert gc.after_step(done, False, env, log) == []
    assert done.outcome.startswith("FAIL (merge") and done.rc != 0


def test_the_rehearsals_device_copy_is_what_a_call_sends_and_refuses_an_oversized_carry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--rehearse copies what a device call sends (files git tracks or does not ignore, and the carried
    folder), nothing else (no .venv), and stops when tree and carry exceed one call's 64 MiB."""
    load("gpu_hosts")
    rehearse = load("gpu_rehearse")
    carried = tmp_path / "load1"
    carried.mkdir()
    (carried / "x.whl").write_bytes(b"0" * 1024)
    tree = tmp_path / "tree"
    rehearse.device_copy(tree, [carried])
    assert (tree / "scripts" / "gpu-check").is_file()
    assert (tree / "tests" / "unit" / Path(__file__).name).is_file()
    assert (tree / "load1" / "x.whl").is_file()
    assert not (tree / ".venv").exists() and not (tree / ".git").exists()
    monkeypatch.setattr(rehearse.gpu_hosts, "LIMIT", rehearse.gpu_hosts.repo_bytes() + 512)
    with pytest.raises(SystemExit, match="would not travel"):
        rehearse.device_copy(tmp_path / "again", [carried])
