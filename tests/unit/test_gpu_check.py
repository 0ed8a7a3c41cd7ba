"""scripts/gpu-check, the one GPU runbook: its plan names every GPU test and GPU benchmark found by glob,
says for each whether it would run and why not, and a real run on a machine without CUDA ends cleanly
with every step skipped and the summary written."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check"
GPU_TESTS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests" / "gpu").glob("test_*.py"))
GPU_BENCHES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "bench").glob("*_gpu.py"))


def load_module():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


def run_script(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "HEADROOM_GPU_CHECK_ONLY"}
    full_env.update(PYTHON=sys.executable, HEADROOM_GPU_SITE=str(tmp_path / "site"), **env)
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120
    )


def test_entry_point_is_executable() -> None:
    assert os.access(SCRIPT, os.X_OK)


def test_dry_run_lists_every_gpu_test_and_benchmark_in_the_order_of_value(tmp_path: Path) -> None:
    res = run_script("--dry-run", tmp_path=tmp_path)
    assert res.returncode == 0, res.stderr
    plan = [line for line in res.stdout.splitlines() if "[expected " in line]
    names = [line.split()[1] for line in plan]
    assert GPU_TESTS and GPU_BENCHES
    for name in [*GPU_TESTS, *GPU_BENCHES, "bench/tiled_vae.py"]:
        assert name in names, f"{name} missing from the plan:\n{res.stdout}"
    # the fixed residency test first, the residency bench before the repeat run, throughput in call 1-2
    assert names[0] == "tests/gpu/test_residency_gpu.py"
    assert names.index("bench/residency_gpu.py") < names.index("bench/host_repeat_gpu.py")
    assert names.index("bench/gpu_throughput_gpu.py") < names.index("bench/dynamic_vram_gpu.py")
    assert all("measured" in line or "estimated" in line for line in plan)
    if not torch.cuda.is_available():
        assert all("skip: no CUDA device" in line for line in plan), res.stdout
    totals = [line for line in res.stdout.splitlines() if line.startswith("device call ")]
    first = int(totals[0].split(": ")[1].split()[0])
    assert totals[0].startswith("device call 1:") and 0 < first <= 570, res.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the real run would run every step")
def test_run_without_cuda_skips_every_step_and_writes_the_summary(tmp_path: Path) -> None:
    results = tmp_path / "results"
    copies = tmp_path / "out"
    res = run_script(
        "--results-dir", str(results), "--budget", "60", "--copy-to", str(copies), tmp_path=tmp_path
    )  # --copy-to: as $OUT on the device
    assert res.returncode == 0, res.stdout + res.stderr
    summary = (results / "gpu-check.md").read_text()
    for name in [*GPU_TESTS, *GPU_BENCHES]:
        row = next(line for line in summary.splitlines() if f"`{name}`" in line)
        assert "skipped: no CUDA device" in row
    for fact in ("- date: ", "- command: `scripts/gpu-check", "- GPU: ", "- CPU: ", "torch ", "- host: "):
        assert fact in summary
    assert (results / "gpu-check.log").is_file()
    assert not list(results.glob("*_gpu.md"))  # no benchmark ran, none wrote a table
    assert sorted(p.name for p in copies.iterdir()) == [
        "gpu-check-results.tgz",
        "gpu-check.log",
        "gpu-check.md",
    ]


def test_a_run_whose_step_fails_says_so_and_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real run's path with steps that run (on any machine): a failing step is a FAIL row with its
    output in the summary, and the run's exit code is 1; the passing step is an ok row."""
    gc = load_module()
    ok = gc.Step("tests/gpu/test_ok.py", "bench", [sys.executable, "-c", "print('fine')"], 60, "-")
    fail = "import sys; print('boom'); sys.exit(3)"
    bad = gc.Step("tests/gpu/test_bad.py", "bench", [sys.executable, "-c", fail], 60, "-")
    monkeypatch.setattr(gc, "discover", lambda results, rehearse=False: [ok, bad])
    monkeypatch.setattr(gc, "plan", lambda steps, only, wheels, rehearse=False: ("a host", None))
    monkeypatch.setattr(gc, "install", lambda wheels, dry: [])
    results = tmp_path / "results"
    assert gc.main(["--results-dir", str(results), "--budget", "120", "--copy-to", str(tmp_path / "o")]) == 1
    summary = (results / "gpu-check.md").read_text()
    assert "| 1 | `tests/gpu/test_ok.py` | ok | 0 |" in summary
    assert "| 2 | `tests/gpu/test_bad.py` | FAIL (rc 3) | 3 |" in summary
    assert "### tests/gpu/test_bad.py: last 1 lines" in summary and "boom" in summary


def test_only_selects_steps(tmp_path: Path) -> None:
    res = run_script("--dry-run", tmp_path=tmp_path, HEADROOM_GPU_CHECK_ONLY="no-such-step")
    plan = [line for line in res.stdout.splitlines() if "[expected " in line]
    assert plan and all("not selected" in line for line in plan)
    assert not any(line.startswith("device call ") for line in res.stdout.splitlines()), "nothing selected"


def test_missing_package_is_the_skip_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gc = load_module()
    monkeypatch.delenv("COMFYUI_ROOT", raising=False)
    monkeypatch.setattr(gc, "cuda_status", lambda: None)
    monkeypatch.setattr(gc, "_module_available", lambda module, wheels: module != "torchsde")
    steps = gc.discover(tmp_path)
    gc.plan(steps, [], {})
    by_name = {s.name: s for s in steps}
    assert "torchsde" in by_name["bench/residency_gpu.py"].skip  # builds its models through the host
    assert by_name["bench/streaming_gpu.py"].skip is None  # the host comparison is optional there
    assert all(by_name[t].skip is None and by_name[t].notes for t in GPU_TESTS)  # pytest skips inside

    monkeypatch.setattr(gc, "_module_available", lambda module, wheels: module != "pytest")
    steps = gc.discover(tmp_path)
    gc.plan(steps, [], {})
    assert all(s.skip == "missing package pytest" for s in steps if s.kind == "pytest")


def test_a_step_past_its_timeout_is_killed_and_reported(tmp_path: Path) -> None:
    gc = load_module()
    code = "import time; print('started', flush=True); time.sleep(120)"
    step = gc.Step("slow", "bench", [sys.executable, "-c", code], 1, "-")
    with (tmp_path / "log").open("w") as log:
        gc.run_step(step, 1, dict(os.environ), log)
    assert step.outcome == "TIMEOUT after 1 s" and step.rc != 0
    assert step.tail == ["started"]
    assert "started" in (tmp_path / "log").read_text()


def test_pytest_summary_becomes_the_result(tmp_path: Path) -> None:
    gc = load_module()
    code = "print('..s'); print('2 passed, 1 skipped in 0.10s')"
    step = gc.Step("t", "pytest", [sys.executable, "-c", code], 60, "-")
    with (tmp_path / "log").open("w") as log:
        gc.run_step(step, 60, dict(os.environ), log)
    assert step.rc == 0 and step.outcome == "ok: 2 passed, 1 skipped in 0.10s"


def test_a_part_is_parsed_and_a_bad_one_refused(tmp_path: Path) -> None:
    out = run_script("--dry-run", "--part", "1", tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    bad = run_script("--dry-run", "--part", "x", tmp_path=tmp_path)
    assert bad.returncode == 2 and "--part" in bad.stderr


def test_the_tiled_vae_step_decodes_every_family_of_issue_32() -> None:
    """bf16 on the GPU for every family: the runbook's tiled-VAE step names each VAE bench/tiled_vae.py
    builds for the 2026 video families (HunyuanVideo 1.5 included), not only the older ones."""
    args = load_module().BENCH_ARGS["bench/tiled_vae.py"]
    families = set(args[args.index("--vaes") + 1].split(","))
    assert {"sd", "flux", "wan21", "wan22", "hunyuan", "hunyuan15", "ltxv", "ltx2"} <= families
