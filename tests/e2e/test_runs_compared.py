"""Runs compared (#42) in a real browser: two consecutive runs of one workflow, and the timeline says
what the second did against the first (disk reads again, RAM/VRAM change and who holds it, the host)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headroom_testing.browser_server import TINY_CHECKPOINT, Server

pytestmark = pytest.mark.e2e
PROMPT = {  # the tiny SD1.5 workflow (test_artist.py's, without its Stream Model)
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


def test_two_runs_show_the_comparison_in_the_timeline(comfy_server: Server, tmp_path: Path) -> None:
    prompt_file = tmp_path / "prompt.json"
    prompt_file.write_text(json.dumps(PROMPT))
    seen = comfy_server.browser("runs_compared.mjs", prompt_file)
    print(json.dumps(seen, indent=1))
    assert seen["errors"] == [], seen["errors"]
    assert seen["first"]["event"] == seen["second"]["event"] == "execution_success"
    compared = seen["compared"]
    assert compared["heading"] == "Since the last run" and compared["previous"] == seen["first"]["promptId"]
    lines = "\n".join(compared["lines"])
    assert "RAM (process)" in lines and "VRAM" in lines
    assert "host settings:" in lines
