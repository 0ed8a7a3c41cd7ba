"""What the nodes say after a run, in both renderers (node_reports.mjs): VRAM Stats names nodes by the titles
the artist gave them and the timeline names each file one way (N15, #29 and #42), and the Tiled VAE Decode
says what it did, on the node (M19, #42): in one pass, or in tiles per level of the decoder, and what sized
its tiles; VRAM Stats' table rows do not wrap (M18)."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from headroom_testing.browser_server import TINY_CHECKPOINT, TINY_PROMPT, start_server

pytestmark = pytest.mark.e2e

DECODE = "HeadroomTiledVAEDecode"
PROMPT: dict[str, Any] = {
    # the diffusion model kept on disk between uses: the residency controller moves it (the timeline's events)
    "4": {"class_type": "HeadroomOffloadLoader", "inputs": {
        "checkpoint": TINY_CHECKPOINT, "diffusion_model": "none", "weight_dtype": "default",
        "text_encoder_1": "none", "text_encoder_2": "none", "text_encoder_3": "none",
        "clip_type": "stable_diffusion", "vae": "none",
        "model_residency": "disk", "text_encoder_residency": "auto", "vae_residency": "auto"}},
    # the tiny workflow's prompts, latent and sampler (2 steps), reading the Offload Loader's outputs
    **{n: copy.deepcopy(TINY_PROMPT[n]) for n in ("6", "7", "5", "3")},
    # auto on the CPU: a 64x64 image fits whole
    "8": {"class_type": DECODE, "inputs": {"samples": ["3", 0], "vae": ["4", 2], "vram_budget": "auto"}},
    "10": {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": ["8", 0]}},
    "9": {"class_type": "PreviewImage", "inputs": {"images": ["10", 0]}},
    # a budget just above the VAE's weights (0.31 GiB in float32): a 192x192 image decodes in tiles
    "13": {"class_type": "EmptyLatentImage", "inputs": {"width": 192, "height": 192, "batch_size": 1}},
    "12": {"class_type": DECODE, "inputs": {"samples": ["13", 0], "vae": ["4", 2], "vram_budget": "0.36"}},
    "14": {"class_type": "PreviewImage", "inputs": {"images": ["12", 0]}},
}  # fmt: skip
PROMPT["3"]["inputs"]["steps"] = 2
# the titles the artist gives the nodes on the canvas
TITLES = {"3": "Main sampler", "4": "Tiny checkpoint", "10": "Memory after decode", "8": "Decode the picture"}


@pytest.fixture(scope="module", params=["classic", "vue"])
def seen(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One run per renderer, each on a server of its own, started afresh: on the session's (a 1 GB card, all
    of which ComfyUI's inference reserve on a CPU takes) the residency controller stands aside and moves
    nothing, so here the card is 8 GB; and a second run of the prompt on one server finds the models where
    the first left them, and moves none of them."""
    tmp = tmp_path_factory.mktemp("node_reports")
    (tmp / "prompt.json").write_text(json.dumps(PROMPT))
    (tmp / "titles.json").write_text(json.dumps(TITLES))
    with start_server(tmp / "server", env={"HEADROOM_ASSUME_VRAM": "8GB"}) as server:
        result = server.browser("node_reports.mjs", tmp / "prompt.json", request.param, tmp / "titles.json")
    print(json.dumps(result, indent=1, ensure_ascii=False)[:8000])
    assert result["errors"] == [], result["errors"]
    assert result["run"]["event"] == "execution_success", result["run"]
    return result


def test_vram_stats_names_the_nodes_by_their_titles(seen: dict[str, Any]) -> None:
    """N15: VRAM Stats said "Headroom memory at node 10" and listed "KSampler", "HeadroomOffloadLoader"."""
    text = seen["texts"]["10"] or ""
    assert text.startswith("Headroom memory at node 10 (Memory after decode):"), text
    assert re.search(r"^ +3 Main sampler ", text, re.M) and re.search(r"^ +4 Tiny checkpoint ", text, re.M), (
        text
    )
    assert not re.search(r"^ +\d+ (KSampler|HeadroomOffloadLoader) ", text, re.M), text


def test_vram_stats_table_rows_do_not_wrap(seen: dict[str, Any]) -> None:
    """M18: the report's table rows wrapped in its 460 px box (the Vue renderer's own text box too): they
    run on sideways, the box scrolls."""
    box = seen["onScreen"]["10"]
    assert box["shown"] and box["sideways"] and box["whiteSpace"] == "pre", box


def test_the_timeline_names_each_file_one_way(seen: dict[str, Any]) -> None:
    """N15: the placements said "headroom_tiny_sd15 [vae]" and the residency events
    "headroom_tiny_sd15.safetensors [vae]" (this server's card leaves the controller room to move them)."""
    rows = seen["rows"]
    assert len(rows) == len(PROMPT), rows
    events = [r for r in rows if r["events"] not in ("", "–")]
    assert events, rows  # the run moved models: the case of N15
    spellings: dict[str, set[str]] = {}  # "[component]" -> the file names written beside it
    for row in rows:
        for cell in (row["placements"], row["events"]):
            for name, component in re.findall(r"([^,:]+?) (\[[^\]]+\]):", cell):
                spellings.setdefault(component, set()).add(name.strip())
    assert spellings and all(len(names) == 1 for names in spellings.values()), spellings


def test_the_tiled_vae_decode_says_it_decoded_whole(seen: dict[str, Any]) -> None:
    """M19: the node said nothing; a small image fits whole (auto on the CPU)."""
    lines = (seen["texts"]["8"] or "").splitlines()
    assert lines[:2] == ["fits whole: decoded in one pass (exact)",
                         "kl VAE, 1 image, 64×64 px"], lines  # fmt: skip
    assert "tiles sized to 2.00 GiB of activations:" in lines, lines
    assert seen["onScreen"]["8"]["shown"], seen["onScreen"]  # in its text box, on the node


def test_the_tiled_vae_decode_says_its_tiles_and_what_sized_them(seen: dict[str, Any]) -> None:
    """M19: a budget that cuts the decode: the tiles per level of the decoder, and the budget input."""
    text = seen["texts"]["12"] or ""
    assert re.match(
        r"decoded in \d+ tiles \(exact\)\nkl VAE, 1 image, 192×192 px\n",
        text,
    ), text
    assert re.search(r"^  up0: up to \d+ tiles, \d+ px$", text, re.M), text
    assert "input vram_budget '0.36' less the VAE's weights" in text and " GiB" in text, text
    assert seen["onScreen"]["12"]["shown"], seen["onScreen"]
