"""bench/activation_models.py builds every family it measures on this host: the GPU runbook's
bench/activations_gpu.py once failed on 0.33 because its FluxParams and HunyuanVideoParams had gained
required fields (txt_ids_dims; use_cond_type_embedding, vision_in_dim, meanflow_sum)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

from headroom_testing.harness import Host

pytestmark = pytest.mark.host
BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_every_measured_family_builds_on_this_host(host: Host) -> None:
    try:
        importlib.import_module("comfy.ldm.wan.model")
    except ImportError:
        pytest.skip("this host predates the families bench/activations.py measures (no comfy.ldm.wan)")
    import comfy.ops

    sys.path.insert(0, str(BENCH))
    try:
        models = importlib.import_module("activation_models")
    finally:
        sys.path.remove(str(BENCH))
    built = []
    for case in models.cases(comfy.ops.disable_weight_init):
        with torch.device("meta"):
            model = case.build(torch.bfloat16, "meta", True)
        assert sum(p.numel() for p in model.parameters()) > 0, case.family
        built.append(case.family)
    assert {"flux", "hunyuan_video", "wan22", "qwen_image", "ltxv"} <= set(built)
