"""A loaded image's size is read from its file on the server before the run (issue #39, item 5).

The host adapter (nodes/host/media_sizes.py) resolves a LoadImage name as the host does, inside its
input folder only, and reads the header; the plan then sizes the latent an image-to-image or
image-to-video node makes from it, where before it assumed 1024x1024 with a note. Names that leave the
input folder (``..``, absolute paths, a symlink out) get the same answer whether the file exists or not."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from headroom_testing.harness import Host

pytestmark = pytest.mark.host


@pytest.fixture
def input_dir(host: Host, tmp_path: Path) -> Any:
    import folder_paths

    before = folder_paths.get_input_directory()
    folder = tmp_path / "input"
    folder.mkdir()
    folder_paths.set_input_directory(str(folder))
    try:
        yield folder
    finally:
        folder_paths.set_input_directory(before)


def _prompt(name: str) -> dict[str, Any]:
    """An image-to-image prompt: the loaded image, encoded, sampled with an SD checkpoint, decoded."""
    return {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sd_xl_base_1.0.safetensors"}},
        "2": {"class_type": "LoadImage", "inputs": {"image": name}},
        "3": {"class_type": "VAEEncode", "inputs": {"pixels": ["2", 0], "vae": ["1", 2]}},
        "4": {"class_type": "CLIPTextEncode", "inputs": {"text": "a", "clip": ["1", 1]}},
        "5": {"class_type": "KSampler", "inputs": {
            "model": ["1", 0], "seed": 0, "steps": 4, "cfg": 5.0, "sampler_name": "euler",
            "scheduler": "simple", "positive": ["4", 0], "negative": ["4", 0], "latent_image": ["3", 0],
            "denoise": 0.6}},
        "6": {"class_type": "VAEDecode", "inputs": {"samples": ["5", 0], "vae": ["1", 2]}},
        "7": {"class_type": "SaveImage", "inputs": {"images": ["6", 0], "filename_prefix": "x"}},
    }  # fmt: skip


def _sampler_compute(host: Host, prompt: dict[str, Any], media: Any) -> tuple[float, tuple[str, ...]]:
    from comfyui_headroom.memory.planning.costmodel import Hardware
    from comfyui_headroom.memory.planning.pipeline import plan_workflow

    planned = plan_workflow(prompt, None, Hardware.for_gpu("RTX 4090"), media=media)
    step = next(s for s in planned.workload.steps if s.node_id == "5")
    return step.compute_s, planned.workload.notes


def test_a_loaded_image_in_the_input_folder_sizes_the_plan(host: Host, input_dir: Path) -> None:
    media = host.pack_module("nodes.host.media_sizes").media_sizes
    Image.new("RGB", (832, 480)).save(input_dir / "start.png")
    Image.new("RGB", (1024, 1024)).save(input_dir / "square.png")
    assert media("LoadImage", {"image": "start.png"}) == (832, 480, 1)
    assert media("LoadImage", {"image": "start.png [input]"}) == (832, 480, 1)
    small, notes = _sampler_compute(host, _prompt("start.png"), media)
    assert not any("read from the file" in n for n in notes)
    square, _ = _sampler_compute(host, _prompt("square.png"), media)
    assert small < square  # 832x480 is planned, not the 1024x1024 default
    # without the host's reader (the command line) the note stays, and the default is assumed
    default, notes = _sampler_compute(host, _prompt("start.png"), None)
    assert default == pytest.approx(square) and any("read from the file when it runs" in n for n in notes)


def test_names_outside_the_input_folder_are_not_read(host: Host, input_dir: Path, tmp_path: Path) -> None:
    media = host.pack_module("nodes.host.media_sizes").media_sizes
    outside = tmp_path / "outside.png"
    Image.new("RGB", (64, 48)).save(outside)
    os.symlink(outside, input_dir / "link.png")
    answers = {
        media("LoadImage", {"image": name})
        for name in (
            "../outside.png",
            str(outside),
            "link.png",
            "../missing.png",
            "/etc/passwd",
            "",
            "a\x00b",
        )
    }
    assert len(answers) == 1 and isinstance(answers.pop(), str)  # one answer, whether the file exists or not
    assert isinstance(media("LoadImage", {"image": ["9", 0]}), str)  # a link is not a name
    (input_dir / "broken.png").write_bytes(b"not an image")
    assert "could not be read" in media("LoadImage", {"image": "broken.png"})
