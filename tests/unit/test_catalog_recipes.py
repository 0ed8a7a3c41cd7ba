"""The catalog builder's dtype recipes on a tiny module (scripts/build_model_catalog.py): a parameter the
host's class pins in fp32 stays fp32 and unquantised, Embedding tables are quantised only when the recipe
says so, int8 adds one fp32 scale per output row. No host is needed: the module is registered by hand."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def _builder():
    sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location(
        "build_model_catalog", ROOT / "scripts" / "build_model_catalog.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        with torch.device("meta"):
            self.embed = torch.nn.Embedding(100, 8, dtype=torch.bfloat16)
            self.proj = torch.nn.Linear(8, 16, dtype=torch.bfloat16)
            self.pinned = torch.nn.Linear(8, 4, dtype=torch.float32)  # as MiniMax H3's patch projections
            self.norm = torch.nn.LayerNorm(16, dtype=torch.bfloat16)


def _register(build, native: bool):
    def make(host):
        return Tiny()

    make.native = native
    build.ARCHS["tiny_recipes"] = make
    build.shapes.cache_clear()


def test_pinned_fp32_and_embedding_roles() -> None:
    build = _builder()
    from catalog_files import INT8, INT8_EMBED, Recipe

    _register(build, native=True)
    specs = build.tensor_specs("tiny_recipes", INT8, "", Path("."))
    assert specs["proj.weight"].dtype == "I8" and specs["proj.weight_scale"].shape == (16, 1)
    assert specs["pinned.weight"].dtype == "F32" and "pinned.weight_scale" not in specs
    assert specs["embed.weight"].dtype == "BF16" and specs["norm.weight"].dtype == "BF16"
    quantised = build.tensor_specs("tiny_recipes", INT8_EMBED, "", Path("."))
    assert quantised["embed.weight"].dtype == "I8" and quantised["embed.weight_scale"].shape == (100, 1)
    fp8 = build.tensor_specs("tiny_recipes", Recipe("BF16", fp8=True, scaled=True, embed=True), "", Path("."))
    assert fp8["embed.weight"].dtype == "F8_E4M3" and "embed.scale_weight" in fp8
    assert fp8["pinned.weight"].dtype == "F32"


def test_a_module_built_in_fp32_pins_nothing() -> None:
    """The older builders make everything fp32 on the meta device: there fp32 says nothing."""
    build = _builder()
    from catalog_files import INT8

    _register(build, native=False)
    specs = build.tensor_specs("tiny_recipes", INT8, "", Path("."))
    assert specs["pinned.weight"].dtype == "I8"
