"""Fixed workloads the planner tests share (hypothesis draws the random ones: strategies.py)."""

from __future__ import annotations

from comfyui_headroom.memory.planning.workload import Component, Step, Workload
from comfyui_headroom.memory.units import GB


def flux_like() -> Workload:
    te = Component("te", "t5xxl", int(9.8 * GB), blocks=(int(0.4 * GB),) * 24)
    dm = Component("dm", "flux1-dev", int(23.8 * GB), blocks=(int(0.4 * GB),) * 57)
    vae = Component("vae", "ae", int(0.17 * GB))
    steps = (
        Step("6", "CLIPTextEncode", ("te",), activation=int(0.5 * GB)),
        Step("7", "CLIPTextEncode", ("te",), activation=int(0.5 * GB)),
        Step("3", "KSampler", ("dm",), evaluations=20, activation=int(1.5 * GB), compute_s=20.0),
        Step("8", "VAEDecode", ("vae",), activation=int(3 * GB)),
        Step("9", "SaveImage"),
    )
    return Workload((te, dm, vae), steps)
