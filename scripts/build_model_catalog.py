"""Build memory/data/model_catalog.json: bytes, dtype and blocks of the model files ComfyUI templates use.

Nothing is downloaded and no weights exist anywhere: every architecture is instantiated on the ``meta``
device with the host ComfyUI's own classes (comfy.ldm.*, comfy.text_encoders.*, comfy.clip_model) and
the configs comfy/model_detection.py derives for the released checkpoints. The state dict's shapes,
with the file's dtype recipe applied, are then fed to ``memory.components.describe_tensors`` - the
same analysis that describes a real file from its header - so the catalog and the header path agree
on families and block names.

Dtype recipes: a file is "all one dtype" (fp32/fp16/bf16), or "fp8": the weights of Linear layers in
float8_e4m3fn and everything else (embeddings, norms, biases, convs) in the base dtype, which is what
ComfyUI's fp8 files hold; "scaled" adds ComfyUI's per-layer ``scale_weight`` and the ``scaled_fp8``
marker. Every component records its ``source`` ("parameters x dtype (host class ...)").

The templates' files no host class here can build (newer architectures, LoRAs of unknown rank) are then
solved from the templates' published sizes by scripts/solve_template_sizes.py (source "template sizes
(linear system, ...)"; the solve's equations are kept under ``template_solve``). Sizes are checked
against the published sizes by scripts/check_model_catalog.py (and tests/unit/test_catalog.py).

The architectures are in scripts/catalog_archs.py, the files and their dtype recipes in
scripts/catalog_files.py; this script turns them into the JSON.

Usage (needs a ComfyUI checkout; 0.33.0 produced the committed JSON, in the venv made by
/work/hosts/mkvenv.sh: torch with the 0.33 requirements; torchaudio is stood in for when missing):
    COMFYUI_ROOT=/path/to/ComfyUI python scripts/build_model_catalog.py [--out memory/data/model_catalog.json]
"""

from __future__ import annotations

import argparse
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # catalog_archs, catalog_files, solve_template_sizes
from catalog_archs import ARCHS, EXTRAS  # noqa: E402
from catalog_files import FILES, LORAS, Recipe  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "memory" / "data" / "model_catalog.json"


def _host() -> Path:
    root = Path(os.environ.get("COMFYUI_ROOT", "/work/comfyui")).resolve()
    if not (root / "comfy" / "model_detection.py").is_file():
        sys.exit(f"COMFYUI_ROOT={root} is not a ComfyUI checkout (set COMFYUI_ROOT)")
    sys.path.insert(0, str(root))
    stub_missing(
        "torchaudio",
        "comfy.sd imports LTX-2's audio VAE, which imports torchaudio; no torchaudio wheel exists for "
        "this torch and no audio op runs on the meta device",
    )
    import comfy.cli_args

    comfy.cli_args.args.cpu = True  # model_management must not look for a GPU at import
    return root


class _Placeholder(types.ModuleType):
    """A missing library's module: any attribute is another placeholder (a class, a function or a
    submodule), so module-level imports and ``class X(torchaudio.Y)`` succeed; calling one fails."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self.__name__}.{name}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__} is a placeholder: the library is not installed")

    def __mro_entries__(self, bases):
        return (object,)


class _PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname, path, target=None):
        if fullname == self.name or fullname.startswith(self.name + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Placeholder(spec.name)

    def exec_module(self, module) -> None:
        module.__path__ = []


def stub_missing(name: str, reason: str) -> None:
    """Stand in for the library ``name`` when it is not installed, printing why (the host imports it at
    module level in code the catalog never runs)."""
    if importlib.util.find_spec(name) is not None:
        return
    print(f"note: {name} is not installed; a placeholder module stands in ({reason})", file=sys.stderr)
    sys.meta_path.insert(0, _PlaceholderFinder(name))


@functools.cache
def shapes(arch: str, host: Path) -> tuple[dict[str, tuple[tuple[int, ...], str]], str]:
    """key -> (shape, role) for an architecture, and the module class for the record. role: "linear"
    (a Linear weight), "embedding" (an Embedding table), "f32" (a parameter the host's class creates in
    fp32 whatever the model's dtype: it stays fp32 and unquantised in the file) or "" (anything else)."""
    base, _, extra = arch.partition("+")
    builder = ARCHS[base]
    module = builder(host)
    native = getattr(builder, "native", False)  # built in bf16: fp32 left means pinned by the class
    linear = {f"{n}.weight" for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)}
    embedding = {f"{n}.weight" for n, m in module.named_modules() if isinstance(m, torch.nn.Embedding)}
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for k, v in module.state_dict().items():
        if not v.is_floating_point():
            continue
        pinned = native and v.dtype == torch.float32
        role = "f32" if pinned else "linear" if k in linear else "embedding" if k in embedding else ""
        out[k] = (tuple(v.shape), role)
    out |= {k: (shape, "") for k, shape in EXTRAS.get(arch, {}).items()}
    return out, type(module).__module__ + "." + type(module).__qualname__ + (f" + {extra}" if extra else "")


def tensor_specs(arch: str, recipe: Recipe, prefix: str, host: Path):
    from comfyui_headroom.memory.models.header import TensorSpec

    specs: dict[str, TensorSpec] = {}
    table, _ = shapes(arch, host)
    for key, (shape, role) in table.items():
        if role == "f32":
            specs[prefix + key] = TensorSpec("F32", shape)
            continue
        quantisable = len(shape) == 2 and (role == "linear" or (role == "embedding" and recipe.embed))
        if recipe.quant and quantisable:
            stem = prefix + key[: -len("weight")]
            out, inp = shape
            if recipe.quant == "int8":
                specs[prefix + key] = TensorSpec("I8", shape)
                specs[stem + "weight_scale"] = TensorSpec("F32", (out, 1))
            else:  # nvfp4
                specs[prefix + key] = TensorSpec("U8", (out, (inp + 1) // 2))
                specs[stem + "weight_scale"] = TensorSpec("F8_E4M3", (out, (inp + 15) // 16))
                specs[stem + "weight_scale_2"] = TensorSpec("F32", ())
            continue
        quantised = recipe.fp8 and quantisable
        specs[prefix + key] = TensorSpec("F8_E4M3" if quantised else recipe.base, shape)
        if quantised and recipe.scaled:
            specs[prefix + key[: -len("weight")] + "scale_weight"] = TensorSpec("F32", ())
    if recipe.scaled:
        specs[prefix + "scaled_fp8"] = TensorSpec("F8_E4M3", (0,))
    return specs


def lora_specs(arch: str, rank: int, recipe: Recipe, host: Path, block_list: str = "blocks."):
    """A LoRA of ``rank`` on every Linear inside the base model's blocks (down, up, alpha per layer)."""
    from comfyui_headroom.memory.models.header import TensorSpec

    specs: dict[str, TensorSpec] = {}
    table, _ = shapes(arch, host)
    for key, (shape, role) in table.items():
        if role == "linear" and key.startswith(block_list) and len(shape) == 2:
            base = "diffusion_model." + key[: -len(".weight")]
            specs[base + ".lora_down.weight"] = TensorSpec(recipe.base, (rank, shape[1]))
            specs[base + ".lora_up.weight"] = TensorSpec(recipe.base, (shape[0], rank))
            specs[base + ".alpha"] = TensorSpec("F32", ())
    return specs


# --- output ----------------------------------------------------------------------------------------


def encode_blocks(blocks) -> list[list]:
    """Runs of consecutive same-size blocks of one list: [list name, first index, count, bytes each]."""
    runs: list[list] = []
    for block in blocks:
        head, _, idx = block.name.rpartition(".")
        if not idx.isdigit():
            runs.append([block.name, None, 1, block.bytes])
            continue
        last = runs[-1] if runs else None
        if (
            last
            and last[0] == head
            and last[1] is not None
            and last[1] + last[2] == int(idx)
            and last[3] == block.bytes
        ):
            last[2] += 1
        else:
            runs.append([head, int(idx), 1, block.bytes])
    return runs


def component_record(info, arch: str, recipe: Recipe, module: str) -> dict:
    return {
        "kind": info.kind,
        "family": info.family,
        "dtype": info.dtype,
        "bytes": info.bytes,
        "blocks": encode_blocks(info.blocks),
        "note": info.note,
        "arch": f"{arch} ({module})",
        "recipe": recipe.base
        + (" + fp8 Linear" if recipe.fp8 else "")
        + (f" + {recipe.quant} Linear" if recipe.quant else "")
        + (" and Embedding" if recipe.embed else "")
        + (" scaled" if recipe.scaled else ""),
        "source": f"parameters x dtype (host class {module})",
    }


def build(host: Path, only: set[str] | None = None) -> dict:
    from comfyui_headroom.memory.models.components import describe_tensors

    kinds = {"diffusion_models": "diffusion_model", "text_encoders": "text_encoder", "vae": "vae"}
    kinds |= {"clip_vision": "clip_vision", "upscale_models": "upscale_model", "loras": "lora"}
    files: dict[str, list[dict]] = {}
    for name, folder, parts in FILES:
        if only is not None and name not in only:
            continue
        components = []
        for prefix, arch, recipe in parts:
            specs = tensor_specs(arch, recipe, "", host)
            kind = kinds.get(folder) if len(parts) == 1 else _section_kind(prefix)
            info = describe_tensors(specs, kind=kind, file=name, source="catalog")
            assert not isinstance(info, list), (name, prefix)
            record = component_record(info, arch, recipe, shapes(arch, host)[1]) | {"prefix": prefix}
            if record["family"] is None and len(parts) == 1 and (named := _named_family(name, kind)):
                record["family"] = named[0]
                record["note"] = "; ".join(p for p in (record["note"], f"family {named[1]}") if p)
            components.append(record)
        if len(parts) > 1:  # the header path must split the whole file into the same components
            whole = {
                p + k: v for p, arch, recipe in parts for k, v in tensor_specs(arch, recipe, "", host).items()
            }
            split = describe_tensors(whole, kind="checkpoint", file=name)
            assert sorted(i.bytes for i in split) == sorted(c["bytes"] for c in components), name
        files.setdefault(name, []).append({"directory": folder, "components": components})
    for name, arch, rank, recipe, *blocks in LORAS:
        if only is not None and name not in only:
            continue
        info = describe_tensors(
            lora_specs(arch, rank, recipe, host, *blocks), kind="lora", file=name, source="catalog"
        )
        record = component_record(info, arch, recipe, shapes(arch, host)[1]) | {"prefix": "diffusion_model."}
        record["note"] = f"rank {rank} on every Linear of the blocks; " + info.note
        record["source"] = f"rank-{rank} LoRA parameters x dtype (host class {shapes(arch, host)[1]})"
        files.setdefault(name, []).append({"directory": "loras", "components": [record]})
    import comfyui_version  # type: ignore[import-not-found]

    result = {
        "schema": 2,
        "generated_by": "scripts/build_model_catalog.py",
        "host": f"ComfyUI {comfyui_version.__version__}",
        "files": files,
    }
    if only is None:  # the templates' other files, solved from their published sizes
        from solve_template_sizes import template_entries

        solved, record = template_entries(files)
        files.update({k: v for k, v in solved.items() if k not in files})
        result["template_solve"] = record
    return result


def _named_family(name: str, kind: str | None) -> tuple[str, str] | None:
    """The family the header's keys leave open, as the catalog knew it before the file was built: the
    exact file's known family (catalog_files.FAMILY_FACTS), else the name's tokens; said in the note."""
    from catalog_files import FAMILY_FACTS

    from comfyui_headroom.memory.models.catalog import estimate_from_name

    if name in FAMILY_FACTS:
        family, why = FAMILY_FACTS[name]
    else:
        family, why = estimate_from_name(name, kind).family, "from the name's tokens"
    return (family, why) if family else None


def _section_kind(prefix: str) -> str:
    if prefix.startswith("model.diffusion_model."):
        return "diffusion_model"
    if prefix.startswith(("vae.", "first_stage_model.")):
        return "vae"
    return "text_encoder"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", nargs="+", help="build just these file names (to check the committed JSON)")
    parser.add_argument(
        "--measure-text-encoders", action="store_true", help="print the activation coefficients instead"
    )
    args = parser.parse_args(argv)
    host = _host()
    if args.measure_text_encoders:
        for tokens in (77, 256, 512):
            print(tokens, measure_text_encoder_activations(host, tokens))
        return 0
    catalog = build(host, set(args.only) if args.only else None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(catalog, indent=1, sort_keys=False) + "\n")
    n = sum(len(v) for v in catalog["files"].values())
    print(f"wrote {args.out} ({n} file entries, {len(catalog['files'])} names, {catalog['host']})")
    return 0


# --- text-encoder activation coefficients (memory/planning/activations.py) ----------------------------------


def measure_text_encoder_activations(host: Path, tokens: int = 256) -> dict[str, float]:
    """Peak live activation bytes of the host's text encoders, per token x hidden x dtype byte.

    Runs each host class on CPU in fp32 at a reduced width (same ffn/hidden ratio and head size as the
    released model) under a TorchDispatchMode that tracks the storage of every tensor an op returns
    and when it is freed, so the peak excludes weights and counts exactly what forward() keeps alive.
    """
    import comfy.cli_args
    from torch.utils._pytree import tree_flatten

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from headroom_testing.measure import PeakLiveBytes

    comfy.cli_args.args.use_pytorch_cross_attention = True

    class PeakLive(PeakLiveBytes):
        """Every storage an op returns, views and in-place outputs included (the coefficients in
        memory/planning/activations.py were measured this way), on any device."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
                    self.count(t)
            return out

    import comfy.ops
    from comfy.clip_model import CLIPTextModel
    from comfy.text_encoders import llama
    from comfy.text_encoders.t5 import T5

    hidden = 512
    ops = comfy.ops.disable_weight_init
    models = {
        # T5-XXL: d_ff/d_model = 10240/4096, head 64 (umT5-XXL is the same shape)
        "t5": T5(
            {"d_ff": 1280, "d_kv": 64, "d_model": hidden, "num_heads": 8, "num_layers": 2, "vocab_size": 1000,
             "dense_act_fn": "gelu_pytorch_tanh", "is_gated_act": True, "model_type": "t5"},
            torch.float32, "cpu", ops,
        ),
        # CLIP-L/G: intermediate 4x, head 64
        "clip": CLIPTextModel(
            {"num_hidden_layers": 2, "hidden_size": hidden, "num_attention_heads": 8,
             "intermediate_size": 2048, "hidden_act": "quick_gelu", "projection_dim": hidden,
             "vocab_size": 1000, "max_position_embeddings": tokens, "eos_token_id": 2},
            torch.float32, "cpu", ops,
        ),
        # Llama-3-8B (ffn 3.5x) and Qwen2.5-7B (ffn 5.3x): head 128, GQA
        "llama": llama.Llama2(
            {"vocab_size": 1000, "hidden_size": hidden, "intermediate_size": 1792, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 1},
            torch.float32, "cpu", ops,
        ),
        "qwen": llama.Llama2(
            {"vocab_size": 1000, "hidden_size": hidden, "intermediate_size": 2706, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 1},
            torch.float32, "cpu", ops,
        ),
    }  # fmt: skip
    result = {}
    for name, model in models.items():
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.02)  # disable_weight_init leaves them uninitialised
        ids = torch.randint(0, 1000, (1, tokens))
        mode = PeakLive()
        with torch.no_grad(), mode:
            model(ids, None)  # no padding mask, as ComfyUI calls them for one prompt
        result[name] = round(mode.peak / (tokens * hidden * 4), 2)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
