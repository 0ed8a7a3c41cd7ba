"""The browser tier's server: a real ComfyUI started for the test session, and a way to run a
playwright script against it (the fixture is in tests/e2e/conftest.py).

The server is `python main.py` of a current ComfyUI (COMFYUI_ROOT) on the CPU, serving the PyPI
frontend, with a copy of this pack in its custom_nodes and a models folder of tiny real-architecture
models (an SD1.5 checkpoint, a VAE), so workflows run end to end. Each browser script (tests/e2e/*.mjs)
opens its own page through lib/page.mjs and prints one JSON line with what the user saw; the tests
assert on it. Everything is skipped, with the reason, when any piece is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from . import pack_copy
from .harness import stop_server, wait_for_server

ROOT = Path(__file__).resolve().parents[2]
# HEADROOM_E2E_PACK: another copy of the pack to serve (e.g. `git worktree add DIR COMMIT` of an older
# commit), to show that a browser test fails before its fix; the tests read its example workflows too.
PACK = Path(os.environ.get("HEADROOM_E2E_PACK", ROOT))
HERE = ROOT / "tests" / "e2e"
LAUNCHER = ROOT / "tests" / "headroom_testing" / "launch_comfyui.py"
CHROMIUM = Path("/usr/bin/chromium")
STARTUP_DEADLINE_S = 300
SCRIPT_TIMEOUT_S = 900
TINY_CHECKPOINT = "headroom_tiny_sd15.safetensors"
ENOMEM_CHECKPOINT = "headroom_tiny_sd15_enomem.safetensors"  # the faults pack cannot map it: ENOMEM
# The frontend to serve: a version from PyPI ("1.49.6", installed once into FRONTEND_CACHE), or a folder
# that holds its static files. Unset: the version the host's requirements.txt names.
FRONTEND_ENV = "HEADROOM_E2E_FRONTEND"
FRONTEND_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "headroom-e2e" / "frontends"


def modern_root() -> Path:
    """COMFYUI_ROOT when it is a current ComfyUI, with every other piece the tests need; else skip."""
    env = os.environ.get("COMFYUI_ROOT")
    if not env:
        pytest.skip("no modern host: set COMFYUI_ROOT to a ComfyUI checkout (0.3.6x or later)")
    root = Path(env)
    if not (root / "comfy_execution").is_dir() or not (root / "main.py").is_file():
        pytest.skip(f"COMFYUI_ROOT={env} is not a current ComfyUI (no comfy_execution/)")
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


def host_frontend(root: Path) -> str:
    """The frontend version the host's requirements.txt names ("" when it names none)."""
    try:
        text = (root / "requirements.txt").read_text()
    except OSError:
        return ""
    found = re.search(r"^comfyui-frontend-package==(\S+)", text, re.M)
    return found.group(1) if found else ""


def frontend_root(root: Path) -> Path | None:
    """The static folder of the frontend to serve: HEADROOM_E2E_FRONTEND, else the host's own version
    (pip-installed into FRONTEND_CACHE on first use); None leaves the host to find its installed one.
    Any version works: the frontend is a parameter of the tier, not a pin."""
    wanted = os.environ.get(FRONTEND_ENV, "").strip() or host_frontend(root)
    if not wanted:
        if importlib.util.find_spec("comfyui_frontend_package") is None:
            pytest.skip(f"no frontend: set {FRONTEND_ENV} to a version such as 1.49.6")
        return None
    if Path(wanted).is_dir():
        return Path(wanted)
    if not re.fullmatch(r"\d+\.\d+\.\d+", wanted):
        pytest.skip(f"{FRONTEND_ENV}={wanted!r}: give a version such as 1.49.6 or a folder")
    target = FRONTEND_CACHE / wanted
    static = target / "comfyui_frontend_package" / "static"
    if not static.is_dir():
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
        done = subprocess.run([*pip, f"comfyui-frontend-package=={wanted}"], capture_output=True, text=True)
        if done.returncode or not static.is_dir():
            pytest.skip(f"frontend {wanted} could not be installed: {done.stderr[-500:]}")
    return static


def build_tiny_models(root: Path, models: Path) -> None:
    """A tiny SD1.5 checkpoint of the real classes (random weights, ~465 MB) for workflows that run:
    CheckpointLoaderSimple, CLIPTextEncode, KSampler (or ours) and VAEDecode all work on it. Built in
    a child process because the builders import the host's ``comfy`` (set to CPU first)."""
    code = (
        "import sys; from pathlib import Path; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
        "import comfy.cli_args; comfy.cli_args.args.cpu = True\n"
        "from headroom_testing.tiny_stock import build_tiny_sd_checkpoint\n"
        "build_tiny_sd_checkpoint(Path(sys.argv[3]), sys.argv[4])\n"
    )
    tests = ROOT / "tests"
    subprocess.run(
        [sys.executable, "-c", code, str(root), str(tests), str(models), TINY_CHECKPOINT], check=True
    )


@dataclass
class Server:
    """A running ComfyUI with Headroom, and the browser scripts' runner."""

    base: str
    home: Path  # the server's base path: custom_nodes, models, input, output, user
    log_path: Path
    artifacts: Path  # where screenshots go (HEADROOM_E2E_ARTIFACTS, else a tmp folder)
    process: subprocess.Popen

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def browser(self, script: str, *args: Any, timeout: float = SCRIPT_TIMEOUT_S) -> dict[str, Any]:
        """Run tests/e2e/<script> with BASE_URL ARTIFACTS_DIR *args; return the JSON line it printed.
        A script that reports a ``failure`` fails the test with it and the server log's tail."""
        command = [shutil.which("node"), str(HERE / script), self.base, str(self.artifacts), *map(str, args)]
        out = subprocess.run(command, capture_output=True, text=True, cwd=HERE, timeout=timeout)
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        assert lines, f"{script} printed nothing:\n{out.stderr[-4000:]}"
        seen = json.loads(lines[-1])
        if "failure" in seen:
            pytest.fail(
                f"{script}: {seen['failure']}\nsteps: {seen.get('steps')}\n"
                f"--- server log ---\n{self.log()[-4000:]}"
            )
        return seen


@contextmanager
def start_server(home: Path, env: dict[str, str] | None = None) -> Iterator[Server]:
    """Start ComfyUI with the pack and tiny models under ``home``; stop it on exit. ``env``: variables
    that replace the defaults below (a test module that needs another server, e.g. another card)."""
    root = modern_root()
    shutil.copytree(PACK, home / "custom_nodes" / "comfyui-headroom", ignore=pack_copy.ignore())
    build_tiny_models(root, home / "models")
    # the machine faults a user meets, on files named for them (tests/e2e/faults; never shipped)
    shutil.copytree(ROOT / "tests" / "e2e" / "faults", home / "custom_nodes", dirs_exist_ok=True)
    checkpoints = home / "models" / "checkpoints"
    os.link(checkpoints / TINY_CHECKPOINT, checkpoints / ENOMEM_CHECKPOINT)  # the same bytes, no copy
    config = home / "extra_model_paths.yaml"
    folders = "\n".join(f"  {name}: models/{name}" for name in ("checkpoints",))
    config.write_text(f"headroom_e2e:\n  base_path: {home}\n  custom_nodes: custom_nodes\n{folders}\n")
    for name in ("output", "input", "temp", "user", "cwd"):
        (home / name).mkdir()
    # A user past the first visit: at a first visit 1.41+ open Browse Templates by themselves, a moment
    # after the app is up, and that dialog then takes a test's first clicks (which test met it first
    # depended on the order the files ran in).
    (home / "user" / "default").mkdir()
    (home / "user" / "default" / "comfy.settings.json").write_text('{"Comfy.TutorialCompleted": true}\n')
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = ["--cpu", "--listen", "127.0.0.1", "--port", str(port), "--extra-model-paths-config", str(config)]
    args += ["--output-directory", str(home / "output"), "--input-directory", str(home / "input")]
    args += ["--temp-directory", str(home / "temp"), "--user-directory", str(home / "user")]
    args += ["--database-url", "sqlite:///:memory:", "--disable-api-nodes"]
    frontend = frontend_root(root)
    if frontend is not None:
        args += ["--front-end-root", str(frontend)]
    # A 1 GB card for preflight (this machine has no GPU), and samples often enough for a short test.
    env = {**os.environ, "HEADROOM_ASSUME_VRAM": "1GB", "HEADROOM_MONITOR_HZ": "4", **(env or {})}
    artifacts = Path(os.environ.get("HEADROOM_E2E_ARTIFACTS", home / "artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    log_path = home / "comfyui.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, str(LAUNCHER), str(root), *args], stdout=log, stderr=subprocess.STDOUT,
            cwd=home / "cwd", env=env,
        )  # fmt: skip
        try:
            wait_for_server(f"{base}/headroom/status", process, log_path, STARTUP_DEADLINE_S)
            yield Server(base, home, log_path, artifacts, process)
        finally:
            stop_server(process)


# The tiny SD1.5 workflow as an API prompt (test_artist.py's, without its Stream Model): it runs in seconds.
TINY_PROMPT = {
    "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": TINY_CHECKPOINT}},
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a red cube", "clip": ["4", 1]}},
    "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["4", 1]}},
    "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
    "3": {
        "class_type": "KSampler",
        "inputs": {
            "model": ["4", 0],
            "positive": ["6", 0],
            "negative": ["7", 0],
            "latent_image": ["5", 0],
            "seed": 1,
            "steps": 4,
            "cfg": 5.0,
            "sampler_name": "euler",
            "scheduler": "normal",
            "denoise": 1.0,
        },
    },  # fmt: skip
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
    "9": {"class_type": "PreviewImage", "inputs": {"images": ["8", 0]}},
}
