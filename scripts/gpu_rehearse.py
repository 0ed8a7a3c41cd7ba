"""``scripts/gpu-check --rehearse``: the GPU runbook as the device runs it, on this CPU (issue #41).

    scripts/gpu-check --rehearse [--host .hosts/comfyui] [--only residency] [--dir ~/.cache/headroom-rehearse]

GPU minutes go to measuring only if the runbook itself works when they start. This runs it as the
device would, step by step:

1. the image: Python 3.12 in a venv of its own with torch 2.11 and the packages the GPU image holds
   that the steps import (made once under ``--dir`` from PyPI, then kept: the device's image is fixed
   too). PyPI's Linux torch 2.11 is the CUDA build (about 2.6 GB with its CUDA libraries); without a
   GPU it runs on the CPU like any other;
2. the carry: ``--prepare --host ROOT`` here when ``.gpu-carry/`` holds no loads (``--prepare`` for the
   CI host's ``.gpu-wheels/`` without a host); each call's 64 MiB limit is checked;
3. the device's copy: a fresh folder holding what a device call sends (tracked and untracked files git
   does not ignore, and the carried folder), nothing installed, no ``.venv``;
4. in it, with the image's Python and fresh scratch folders: ``--receive`` for each load (the wheels
   installed offline, the host unpacked), then ``scripts/gpu-check --hosts`` the received host, every
   step run on the CPU as far as it goes (``--cpu-stand-in``: a benchmark's CPU smoke or dry run,
   gpu_order.REHEARSE; a GPU test skips inside pytest after its imports and collection; the throughput
   step's merge into a scratch table), with ``$OUT`` set, as the device tool sets it.

It passes when every step exits 0 and ``$OUT`` holds the summary and the results tarball. Too heavy for
CI (minutes on two cores, a 2.6 GB image on first use): run it before a GPU window, after changing the
runbook, a GPU step or the carry.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import gpu_hosts

ROOT = Path(__file__).resolve().parents[1]
TORCH = os.environ.get("HEADROOM_REHEARSE_TORCH", "torch==2.11.0")  # the device image's (KINDS.md)
# What the device image holds that the steps and hosts import (KINDS.md's list); versions: PyPI's.
IMAGE = (
    "numpy", "safetensors", "einops", "psutil", "scipy", "pillow", "pyyaml", "pytest", "aiohttp",
    "transformers", "tokenizers", "sentencepiece", "tqdm", "requests", "torchvision==0.26.0",
)  # fmt: skip


def find_python() -> str:
    """A Python 3.12 (the device image's): $HEADROOM_REHEARSE_PYTHON, python3.12, or pyenv's."""
    candidates = [os.environ.get("HEADROOM_REHEARSE_PYTHON", ""), "python3.12"]
    candidates += sorted(
        glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")), reverse=True
    )
    for exe in filter(None, candidates):
        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if out.returncode == 0 and out.stdout.startswith("Python 3.12"):
            return exe
    raise SystemExit("--rehearse needs a Python 3.12 (set HEADROOM_REHEARSE_PYTHON)")


def image(base: Path) -> Path:
    """The image's venv (made once): Python 3.12 with TORCH and IMAGE. Returns its python."""
    venv = base / f"image-py312-{TORCH.replace('==', '')}"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([find_python(), "-m", "venv", str(venv)], check=True)
    names = [p.split("==")[0] for p in IMAGE]
    check = (
        "import importlib.metadata as m\n"
        "def has(n):\n"
        "    try:\n        m.distribution(n); return True\n"
        "    except m.PackageNotFoundError:\n        return False\n"
        f"gone = [n for n in {names!r} if not has(n)]\n"
        "import torch; print(torch.__version__ if not gone else 'missing ' + ' '.join(gone))"
    )
    have = subprocess.run([python, "-c", check], capture_output=True, text=True).stdout.strip()
    want = TORCH.split("==")[1] if "==" in TORCH else ""
    if not have or have.startswith("missing") or (want and not have.startswith(want)):
        print(
            f"rehearse: installing {TORCH} and the image's packages into {venv} ({have or 'new'})", flush=True
        )
        subprocess.run([python, "-m", "pip", "install", "-q", TORCH, *IMAGE], check=True)
        have = subprocess.run([python, "-c", check], capture_output=True, text=True).stdout.strip()
    print(f"rehearse: image {venv}: Python 3.12, torch {have}", flush=True)
    return python


def carry(host: Path | None) -> list[Path]:
    """The folders the device calls carry, made here (with network) when missing."""
    if host is not None:
        loads = sorted(gpu_hosts.CARRY.glob("load*"))
        if not loads:
            cmd = [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--prepare", "--host", str(host)]
            subprocess.run(cmd, check=True)
            loads = sorted(gpu_hosts.CARRY.glob("load*"))
        return loads
    wheels = ROOT / ".gpu-wheels"
    if not any(wheels.glob("*.whl")):
        subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--prepare"], check=True)
    return [wheels]


def device_copy(dest: Path, carried: list[Path]) -> None:
    """What a device call sends: tracked and untracked-not-ignored files, and the carried folders. Each
    call carries one load beside the tree; say if one would be over the limit."""
    cmd = ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    names = [n for n in subprocess.run(cmd, capture_output=True, check=True).stdout.decode().split("\0") if n]
    for name in names:
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    tree = gpu_hosts.repo_bytes()
    for folder in carried:
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        verdict = "fits" if tree + size <= gpu_hosts.LIMIT else "OVER the 64 MiB of one call"
        print(
            f"rehearse: carry {folder.name}: {size / 2**20:.1f} MiB + tree {tree / 2**20:.1f} MiB: {verdict}"
        )
        if tree + size > gpu_hosts.LIMIT:
            raise SystemExit(f"rehearse: {folder} would not travel in one device call")
        shutil.copytree(
            folder, dest / (folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder.name)
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/gpu-check --rehearse", description=__doc__.split("\n\n")[0]
    )
    default_host = ROOT / ".hosts" / "comfyui"
    host_help = "the ComfyUI to carry (default .hosts/comfyui when there; else the CI host)"
    parser.add_argument(
        "--host", type=Path, default=default_host if default_host.is_dir() else None, help=host_help
    )
    parser.add_argument("--only", default="", help="as gpu-check's --only")
    parser.add_argument("--dir", type=Path, default=Path("~/.cache/headroom-rehearse").expanduser())
    parser.add_argument("--keep", action="store_true", help="keep the device copy and its results")
    args = parser.parse_args(argv)
    python = image(args.dir)
    carried = carry(args.host.resolve() if args.host else None)
    run = args.dir / datetime.datetime.now(datetime.UTC).strftime("run-%Y%m%d-%H%M%S")
    tree, out, results = run / "tree", run / "out", run / "results"
    for folder in (tree, out, results):
        folder.mkdir(parents=True)
    device_copy(tree, carried)
    env = {k: v for k, v in os.environ.items() if k not in ("COMFYUI_ROOT", "PYTHONPATH", "VIRTUAL_ENV")}
    env |= {
        "PYTHON": str(python), "OUT": str(out), "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1",
        "HEADROOM_GPU_SITE": str(run / "site"), "HEADROOM_GPU_RECEIVED": str(run / "received"),
        "HEADROOM_GPU_HOSTS_DIR": str(run / "hosts"), "HEADROOM_GPU_HOSTS": "",
    }  # fmt: skip
    gpu_check = ["bash", str(tree / "scripts" / "gpu-check")]
    for load in carried if args.host else []:
        subprocess.run([*gpu_check, "--receive", str(load.relative_to(ROOT))], cwd=tree, env=env, check=True)
    hosts = sorted(str(p) for p in (run / "hosts").glob("comfyui-*/comfyui"))
    cmd = [*gpu_check, "--cpu-stand-in", "--budget", "7200", "--results-dir", str(results)]
    cmd += ["--hosts", ",".join(hosts)] if hosts else []
    cmd += ["--only", args.only] if args.only else []
    print("rehearse: $ " + " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=tree, env=env).returncode
    problems = [] if rc == 0 else [f"gpu-check exited {rc}"]
    tarball = out / "gpu-check-results.tgz"
    if not (out / "gpu-check.md").is_file() or not tarball.is_file():
        problems.append(f"$OUT ({out}) lacks gpu-check.md or gpu-check-results.tgz")
    else:
        with tarfile.open(tarball) as tar:
            names = tar.getnames()
        print(f"rehearse: $OUT/{tarball.name} holds {len(names)} files: {', '.join(sorted(names))}")
    if not args.keep and not problems:
        shutil.rmtree(run, ignore_errors=True)
    print("rehearse: " + ("PASSED" if not problems else "FAILED: " + "; ".join(problems) + f" (kept {run})"))
    return 0 if not problems else 1
