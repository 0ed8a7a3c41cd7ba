"""The frontend in a real browser: Debian's Chromium driven by playwright-core against `python main.py`
of a current ComfyUI (COMFYUI_ROOT) serving the PyPI frontend, with the pack in its custom_nodes.

Opens the page, opens Headroom's sidebar tab, runs a small workflow with a Memory Monitor under both node
renderers, checks the panel shows samples, the per-node badges appear, the residency timeline fills, a
preflight warning becomes a toast, and saves a screenshot (HEADROOM_E2E_ARTIFACTS, else the test's tmp).
Skipped, with the reason, when any piece is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from headroom_testing.harness import stop_server, wait_for_server

pytestmark = pytest.mark.e2e
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LAUNCHER = ROOT / "tests" / "headroom_testing" / "launch_comfyui.py"
CHROMIUM = Path("/usr/bin/chromium")
STARTUP_DEADLINE_S = 300
PROMPT = {
    "1": {
        "class_type": "EmptyImage",
        "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 3050327},
    },
    "2": {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": ["1", 0]}},
    "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
    "4": {"class_type": "PreviewImage", "inputs": {"images": ["2", 2]}},
}


def modern_root() -> Path:
    """COMFYUI_ROOT when it is a current ComfyUI, with every other piece the test needs; else skip."""
    env = os.environ.get("COMFYUI_ROOT")
    if not env:
        pytest.skip("no modern host: set COMFYUI_ROOT to a ComfyUI checkout (0.3.6x or later)")
    root = Path(env)
    if not (root / "comfy_execution").is_dir() or not (root / "main.py").is_file():
        pytest.skip(f"COMFYUI_ROOT={env} is not a current ComfyUI (no comfy_execution/)")
    if importlib.util.find_spec("comfyui_frontend_package") is None:
        pytest.skip("the PyPI frontend is not installed: pip install comfyui-frontend-package")
    if not CHROMIUM.is_file():
        pytest.skip("Debian chromium is not installed: apt-get install chromium chromium-driver")
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    if not (HERE / "node_modules" / "playwright-core").is_dir():
        pytest.skip("playwright-core is not installed: run `npm ci` in tests/e2e")
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(base: str, server: subprocess.Popen, log_path: Path) -> None:
    wait_for_server(f"{base}/headroom/status", server, log_path, STARTUP_DEADLINE_S)


def test_panel_badges_timeline_and_preflight_in_a_real_browser(tmp_path: Path) -> None:
    root = modern_root()
    ignore = shutil.ignore_patterns(
        ".venv", ".git", "__pycache__", "*.egg-info", ".*_cache", ".hypothesis", "node_modules"
    )
    shutil.copytree(ROOT, tmp_path / "custom_nodes" / "comfyui-headroom", ignore=ignore)
    config = tmp_path / "extra_model_paths.yaml"
    config.write_text(f"headroom_e2e:\n  base_path: {tmp_path}\n  custom_nodes: custom_nodes\n")
    for name in ("output", "input", "temp", "user", "cwd"):
        (tmp_path / name).mkdir()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = ["--cpu", "--listen", "127.0.0.1", "--port", str(port), "--extra-model-paths-config", str(config)]
    args += ["--output-directory", str(tmp_path / "output"), "--input-directory", str(tmp_path / "input")]
    args += ["--temp-directory", str(tmp_path / "temp"), "--user-directory", str(tmp_path / "user")]
    args += ["--database-url", "sqlite:///:memory:", "--disable-api-nodes"]
    # A 1 GB card for preflight (this machine has no GPU), and samples often enough for a short test.
    env = {**os.environ, "HEADROOM_ASSUME_VRAM": "1GB", "HEADROOM_MONITOR_HZ": "4"}
    prompt_file, flux_file = tmp_path / "prompt.json", tmp_path / "flux.json"
    prompt_file.write_text(json.dumps(PROMPT))
    shutil.copy(ROOT / "workflows" / "api" / "flux_dev_t2i.json", flux_file)
    artifacts = Path(os.environ.get("HEADROOM_E2E_ARTIFACTS", tmp_path))
    artifacts.mkdir(parents=True, exist_ok=True)
    screenshot = artifacts / "headroom-monitor.png"
    log_path = tmp_path / "comfyui.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [sys.executable, str(LAUNCHER), str(root), *args], stdout=log, stderr=subprocess.STDOUT,
            cwd=tmp_path / "cwd", env=env,
        )  # fmt: skip
        try:
            wait_until_up(base, server, log_path)
            node = [shutil.which("node"), str(HERE / "browser.mjs"), base, str(screenshot)]
            out = subprocess.run(
                [*node, str(prompt_file), str(flux_file)],
                capture_output=True,
                text=True,
                cwd=HERE,
                timeout=900,
            )
        finally:
            stop_server(server)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert lines, f"the browser script printed nothing:\n{out.stderr[-4000:]}"
    seen = json.loads(lines[-1])
    print(json.dumps(seen, indent=1))
    server_log = log_path.read_text(errors="replace")
    assert "failure" not in seen, seen["failure"] + "\n--- server log ---\n" + server_log[-4000:]
    assert seen["errors"] == [], seen["errors"]
    for run in (seen["classic"], seen["vue"]):
        assert sorted(n for n, _, _ in run["reportNodes"]) == ["1", "2", "3", "4"]  # outputs: host's order
        status = {n: st for n, _, st in run["reportNodes"]}
        assert status["2"] == status["3"] == status["4"] == "done"  # the monitor runs every time
        assert status["1"] in ("done", "not run")  # the second run serves EmptyImage from the cache
        assert run["badgeRecords"] >= 2
        assert len(run["monitorBadges"]) == 1 and run["monitorBadges"][0].startswith("RSS ")  # CPU: no VRAM
    assert seen["samples"] >= 2 and seen["panelNodeRows"] >= 2
    assert seen["timelineRows"] == 4
    assert seen["toast"]["severity"] == "error" and "CLIPTextEncode" in seen["toast"]["summary"]
    assert seen["toastShown"] >= 1
    assert screenshot.is_file() and screenshot.stat().st_size > 10_000
    assert "Traceback" not in "\n".join(b for b in server_log.split("\n\n") if "headroom" in b.lower())
