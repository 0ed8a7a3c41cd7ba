"""The shipped example workflows are valid prompts for the real host (its own validate_prompt)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headroom_testing.harness import Host

pytestmark = pytest.mark.host
WORKFLOWS = Path(__file__).resolve().parents[2] / "example_workflows"
API_FILES = sorted((WORKFLOWS / "api").glob("*.json"))
FOLDER_OF = {
    "unet_name": "diffusion_models",
    "clip_name": "text_encoders",
    "clip_name1": "text_encoders",
    "clip_name2": "text_encoders",
    "vae_name": "vae",
    "ckpt_name": "checkpoints",
    # the Offload Loader's file inputs ("vae" is also VAEDecode's input: a link there, never a string)
    "checkpoint": "checkpoints",
    "diffusion_model": "diffusion_models",
    "text_encoder_1": "text_encoders",
    "text_encoder_2": "text_encoders",
    "text_encoder_3": "text_encoders",
    "vae": "vae",
}


# Examples of 2026 models, whose nodes hosts before 0.18 lack (HunyuanVideo 1.5's latent node, Flux.2's
# latent and scheduler).
NEWER_THAN_SOME_HOSTS = frozenset(
    {"HunyuanVideo 1.5 720p text to video", "Flux.2 Klein 4B fp8 on an 8 GB card"}
)


@pytest.mark.parametrize("path", API_FILES, ids=lambda p: p.stem)
def test_example_prompt_validates_in_the_host(host: Host, path: Path) -> None:
    prompt = json.loads(path.read_text())
    missing = sorted({n["class_type"] for n in prompt.values()} - set(host.nodes.NODE_CLASS_MAPPINGS))
    if missing and (host.legacy or path.stem in NEWER_THAN_SOME_HOSTS):
        pytest.skip(f"this host predates {', '.join(missing)}")
    assert not missing
    placeholders = []
    for node in prompt.values():  # validation checks file names against the folders, not contents
        for name, folder in FOLDER_OF.items():
            value = node["inputs"].get(name)
            placeholder = host.models_dir / folder / str(value)
            if isinstance(value, str) and value != "none" and not placeholder.exists():
                placeholder.write_bytes(b"")
                placeholders.append(placeholder)
    host.register_models_dir(host.models_dir)
    try:
        assert host.validate(prompt, path.stem)
    finally:  # empty "model files" would stop every later test's planning (they are not safetensors)
        for placeholder in placeholders:
            placeholder.unlink()
        host.register_models_dir(host.models_dir)
