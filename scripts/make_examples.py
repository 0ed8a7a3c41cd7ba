"""Regenerate example_workflows/: each UI workflow from its API twin (api/<title>.json), laid out with
the node sizes the real frontend computes, with a note (what it does, the models and their links, the
VRAM/RAM Headroom's plan needs), and its thumbnail <title>.jpg, a screenshot of the loaded graph.

    COMFYUI_ROOT=/path/to/ComfyUI .venv/bin/python scripts/make_examples.py [TITLE ...]

Each node is measured on every frontend of HEADROOM_EXAMPLE_FRONTENDS (default 1.41.21,1.49.6,1.58.1),
in the classic and the Vue renderer, and laid out with the largest size, so an example overlaps on none;
the thumbnails come from the last.

Needs what the browser tests need (tests/headroom_testing/browser_server.py): a current ComfyUI, the
PyPI frontend, Chromium and `npm ci` in tests/e2e. ComfyUI's Browse Templates shows a custom node's
examples by file name, with <name>.jpg as the thumbnail, so the file names are the titles.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "example_workflows"
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "tests")]

from api_to_ui import MODEL_LINKS, convert  # noqa: E402

# What each example does, and the budget the note quotes Headroom's plan for (the README's "try").
ABOUT = {
    "SDXL on an 8 GB card": (
        "SDXL base text to image, 1024×1024, 25 steps: one 6.9 GB checkpoint and the stock nodes, with "
        "Headroom's Tiled VAE Decode in place of VAE Decode (the decode is the step that needs the most "
        "VRAM beside the model). Press **Will it fit?** in the Headroom sidebar before Run.",
        "8GB",
        "16GB",
    ),
    "Flux.2 Klein 4B fp8 on an 8 GB card": (
        "Flux.2 Klein 4B (distilled, 2026) text to image, 1024×1024, 4 steps, as the official template "
        "`image_flux2_klein_text_to_image` builds it with the stock nodes, from three small files: the "
        "fp8 diffusion model (3.9 GB), the fp8 Qwen3 4B text encoder (4.4 GB) and the Flux.2 VAE. "
        "Press **Will it fit?** in the Headroom sidebar before Run.",
        "8GB",
        "16GB",
    ),
    "Flux Dev text to image": (
        "Flux-dev text to image, 1024×1024, 20 steps, with ComfyUI's stock loaders (UNET, T5-XXL + "
        "CLIP-L, VAE) and KSampler. Nothing to set: Headroom plans where each model lives as it runs "
        "(Headroom tab in the sidebar, timeline in the bottom panel).",
        "8GB",
        "32GB",
    ),
    "Flux Dev with the streaming sampler": (
        "Flux-dev with Headroom's streaming sampler in place of KSampler: the diffusion model's blocks "
        "stream from RAM during each step, so a card smaller than the model runs it. Stock loaders.",
        "8GB",
        "32GB",
    ),
    "Flux Dev with the Offload Loader": (
        "Flux-dev from one Offload Loader (diffusion model, both text encoders and the VAE, each with "
        "its residency: auto, gpu, ram or disk), Headroom's streaming sampler and the Tiled VAE Decode.",
        "8GB",
        "32GB",
    ),
    "Flux Dev 2048px with Tiled VAE decode": (
        "Flux-dev at 2048×2048, decoded by Headroom's Tiled VAE Decode: exact tiles sized to the VRAM "
        "left (budget auto), where a plain VAE Decode of this size would run out of memory.",
        "8GB",
        "32GB",
    ),
    "Wan 2.2 14B text to video": (
        "Wan 2.2 14B text to video, 640×640, 81 frames, 20 steps: the high-noise expert for the first "
        "10 steps, the low-noise expert for the rest. Stock nodes only.",
        "16GB",
        "64GB",
    ),
    "Wan 2.2 14B with Stream Model": (
        "Wan 2.2 14B text to video with the templates' samplers, two KSamplerAdvanced (the high-noise "
        "expert for steps 0-10, the low-noise one for 10-20), each expert through Headroom's Stream "
        "Model: its blocks stream from RAM while its sampler runs (vram_budget auto). Stock loaders.",
        "8GB",
        "32GB",
    ),
    "Wan 2.2 14B with Offload Loaders": (
        "Wan 2.2 14B with one Offload Loader per expert; the text encoder's residency is `disk` (read "
        "once, then dropped), and the video is decoded by the Tiled VAE Decode. The samplers are the "
        "stock KSamplerAdvanced (start/end steps).",
        "16GB",
        "64GB",
    ),
    "HunyuanVideo 1.5 720p text to video": (
        "HunyuanVideo 1.5 (8.3B, 2026) text to video, 1280×720×121, 20 steps, as the official template "
        "`video_hunyuan_video_1.5_720p_t2v` builds it with the stock nodes (Qwen2.5-VL 7B + ByT5, "
        "SamplerCustomAdvanced). On a 12 GB card the plan streams part of the 16 GB diffusion model from "
        "pinned RAM; Headroom does it as the workflow runs.",
        "12GB",
        "32GB",
    ),
}


def model_files(prompt: dict) -> list[str]:
    names = [v for n in prompt.values() for v in n["inputs"].values() if isinstance(v, str)]
    return [n for n in dict.fromkeys(names) if n in MODEL_LINKS]


def plan_line(api: Path, vram: str, ram: str) -> str:
    """Headroom's own plan of the workflow at the given budget, as one sentence of the note."""
    command = [sys.executable, "-m", "comfyui_headroom", "plan", str(api), "--vram", vram, "--ram", ram]
    plan = json.loads(subprocess.run([*command, "--json"], capture_output=True, check=True, text=True).stdout)
    gib = 1024**3
    fits = "fits" if plan["fits"] else "does not fit"
    return (
        f"Headroom's plan: at least **{plan['min_vram_bytes'] / gib:.1f} GiB** of VRAM. With {vram[:-2]} GB "
        f"of VRAM and {ram[:-2]} GB of RAM it {fits}, VRAM peak {plan['vram_peak'] / gib:.1f} GiB."
    )


def note(title: str, api: Path) -> str:
    what, vram, ram = ABOUT[title]
    prompt = json.loads(api.read_text())
    models = "\n".join(
        f"- [{name}]({MODEL_LINKS[name][1]}) → `models/{MODEL_LINKS[name][0]}/`"
        for name in model_files(prompt)
    )
    return (
        f"## {title}\n\n{what}\n\n### Models\n\n{models}\n\n### Memory\n\n{plan_line(api, vram, ram)}\n\n"
        f'Your card: `python -m comfyui_headroom plan "example_workflows/{title}.json" --vram {vram} '
        f"--ram {ram}`\n"
    )


def browser(base: str, mode: str, files: list[Path], out: Path) -> dict:
    script = ROOT / "scripts" / "examples.mjs"
    run = subprocess.run(
        ["node", str(script), base, str(out), mode, *map(str, files)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if not lines or "failure" in json.loads(lines[-1]):
        raise SystemExit(f"examples.mjs {mode} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return json.loads(lines[-1])


def main(titles: list[str]) -> None:
    """Regenerate every example, or only those ``titles`` name."""
    from headroom_testing.browser_server import FRONTEND_ENV, start_server

    apis = sorted(p for p in (EXAMPLES / "api").glob("*.json") if not titles or p.stem in titles)
    notes = {api.stem: note(api.stem, api) for api in apis}
    for api in apis:  # first with estimated sizes, to measure the real ones
        ui = convert(json.loads(api.read_text()), note=notes[api.stem])
        (EXAMPLES / api.name).write_text(json.dumps(ui, indent=1, ensure_ascii=False) + "\n")
    uis = [EXAMPLES / api.name for api in apis]
    frontends = os.environ.get("HEADROOM_EXAMPLE_FRONTENDS", "1.41.21,1.49.6,1.58.1").split(",")
    measured: dict[str, dict[str, list[int]]] = {}
    for frontend in frontends:
        os.environ[FRONTEND_ENV] = frontend.strip()
        with tempfile.TemporaryDirectory() as tmp, start_server(Path(tmp)) as server:
            for title, sizes in browser(server.base, "measure", uis, Path(tmp))["sizes"].items():
                largest = measured.setdefault(title, {})
                for node, size in sizes.items():
                    largest[node] = [max(a, b) for a, b in zip(largest.get(node, size), size, strict=True)]
            print(f"measured on frontend {frontend}")
            if frontend != frontends[-1]:
                continue
            for api in apis:
                sizes = measured[api.stem]
                ui = convert(json.loads(api.read_text()), sizes=sizes, note=notes[api.stem])
                (EXAMPLES / api.name).write_text(json.dumps(ui, indent=1, ensure_ascii=False) + "\n")
                print(f"{api.stem}: {len(sizes)} nodes measured")
            browser(server.base, "thumbnail", uis, EXAMPLES)
    print(f"wrote {len(uis)} workflows and thumbnails to {EXAMPLES}")


if __name__ == "__main__":
    main(sys.argv[1:])
