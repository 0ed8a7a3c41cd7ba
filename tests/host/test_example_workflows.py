"""The shipped example workflows are valid prompts for the real host (its own validate_prompt)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headroom_testing.harness import Host

pytestmark = pytest.mark.host
WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
API_FILES = sorted((WORKFLOWS / "api").glob("*.json"))
FOLDER_OF = {
    "unet_name": "diffusion_models",
    "clip_name": "text_encoders",
    "clip_name1": "text_encoders",
    "clip_name2": "text_encoders",
    "vae_name": "vae",
    "ckpt_name": "checkpoints",
}


@pytest.mark.parametrize("path", API_FILES, ids=lambda p: p.stem)
def test_example_prompt_validates_in_the_host(host: Host, path: Path) -> None:
    prompt = json.loads(path.read_text())
    missing = sorted({n["class_type"] for n in prompt.values()} - set(host.nodes.NODE_CLASS_MAPPINGS))
    if missing and host.legacy:
        pytest.skip(f"the 2024-03 host predates {', '.join(missing)}")
    assert not missing
    for node in prompt.values():  # validation checks file names against the folders, not contents
        for name, folder in FOLDER_OF.items():
            if isinstance(node["inputs"].get(name), str):
                (host.models_dir / folder / node["inputs"][name]).write_bytes(b"")
    host.register_models_dir(host.models_dir)
    outputs = host.validate(prompt, path.stem)
    assert outputs
