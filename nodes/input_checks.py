"""Checks of a node's inputs against the model they meet, so that a mismatch fails with a message that
names the node, the input and the fix instead of a torch error deep inside the host."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .host.host_types import ModelPatcher


class OffloadError(ValueError):
    """A file the Offload Loader cannot use: the message names the input, the file and the problem."""

    # The host shows an error's type as module + name, and loads the pack under its folder's path: the
    # dialog read "...custom_nodes/comfyui-headroom.nodes.input_checks.OffloadError" (M17).
    __module__ = "headroom"


def _layout(dims: int) -> str:
    return {1: "[batch, channels, length]", 3: "[batch, channels, frames, height, width]"}.get(
        dims, "[batch, channels, height, width]"
    )


def latent_problem(
    shape: Sequence[int], channels: int | None, dims: int, *, four_d_ok: bool = False
) -> str | None:
    """What is wrong with a latent of ``shape`` for something taking ``channels``-channel latents with
    ``dims`` spatial dimensions (None when nothing is). ``four_d_ok``: a 4-D latent is accepted for a
    3-D model (the host adds the frame axis)."""
    shape = tuple(int(s) for s in shape)
    ndims = len(shape)
    if ndims != dims + 2 and not (four_d_ok and dims == 3 and ndims == 4):
        return f"is {ndims}-D {list(shape)}, but it takes {dims + 2}-D latents {_layout(dims)}"
    if shape[0] == 0:
        return f"is an empty batch {list(shape)} (batch size 0)"
    if any(s == 0 for s in shape[1:]):
        return f"is empty {list(shape)} (a dimension of size 0)"
    if channels is not None and shape[1] != channels:
        return f"has {shape[1]} channels {list(shape)}, but it takes {channels}-channel latents"
    return None


EMPTY_FIX = "There is nothing in it to compute: check the batch size and size of the node that made it."


def latent_error(node: str, input_name: str, problem: str, fix: str) -> str:
    """The message: node, input, what is wrong, what to do (``EMPTY_FIX`` for an empty latent)."""
    if "size 0" in problem:
        fix = EMPTY_FIX
    return f"{node}: input {input_name}: the latent {problem}. {fix}"


# The text encoders each diffusion-model family (memory.components' names) is conditioned with; a
# family not listed is not checked.
ENCODERS_FOR = {
    "sd15": {"clip_l"},
    "sd2": {"clip_h"},
    "sdxl": {"clip_l", "clip_g"},
    "sdxl_refiner": {"clip_g"},
    "sd3": {"clip_l", "clip_g", "t5xxl"},
    "flux": {"clip_l", "t5xxl"},
    "chroma": {"t5xxl"},
    "wan21": {"umt5xxl"},
    "wan22": {"umt5xxl"},
}


def encoder_pairing_problem(model_family: str | None, encoders: dict[str, str | None]) -> str | None:
    """Why the text encoders (input -> detected family) cannot condition a ``model_family`` model, or
    None. Two encoders of one family never make sense (a model takes each kind once)."""
    seen: dict[str, str] = {}
    for name, family in encoders.items():
        if family is None:
            continue
        if family in seen:
            first = seen[family]
            return f"inputs {first} and {name} are both {family} text encoders; a model takes one of each"
        seen[family] = name
    allowed = ENCODERS_FOR.get(model_family or "")
    if allowed is None:
        return None
    for name, family in encoders.items():
        if family is not None and family not in allowed:
            return (
                f"input {name} is a {family} text encoder, but a {model_family} diffusion model takes "
                f"{' + '.join(sorted(allowed))}"
            )
    return None


def conditioning_error(node: str, model: ModelPatcher, positive: Any, exc: BaseException) -> str:
    """The message for a sampler whose model could not take its conditioning (the host's raw "mat1 and
    mat2 shapes cannot be multiplied"): the conditioning's width, the model's class and the fix."""
    try:
        width = int(positive[0][0].shape[-1])
        got = f"the conditioning is {width} wide"
    except (IndexError, TypeError, AttributeError, ValueError):
        got = "the conditioning"
    config = getattr(getattr(model, "model", None), "model_config", None)
    family = type(config).__name__ if config is not None else "this"
    return (
        f"{node}: inputs positive and negative: {got}, and the {family} diffusion model cannot take it "
        f"({str(exc)[:160]}). The prompt was encoded with text encoders of another model family (a "
        "checkpoint's own CLIP for a Wan, Flux or SD3 model, say): encode it with the text encoders this "
        "model was trained with (a Wan model takes umt5xxl, Flux t5xxl with clip_l)"
    )


# --- Offload Loader: files that load but cannot work together ------------------------------------
def check_checkpoint_parts(path: Path, infos: list[Any], need_clip: bool, need_vae: bool) -> None:
    """A checkpoint must hold what no other input replaces (a diffusion-model-only file has no VAE)."""
    kinds = {i.kind for i in infos}
    missing = [
        (part, fix)
        for part, kind, needed, fix in (
            ("text encoder", "text_encoder", need_clip, "text_encoder_1"),
            ("VAE", "vae", need_vae, "vae"),
        )
        if needed and kind not in kinds
    ]
    if missing:
        parts = " or ".join(p for p, _ in missing)
        inputs = " and ".join(f for _, f in missing)
        raise OffloadError(
            f"Offload Loader: input checkpoint: {path.name} holds no {parts} (it holds: "
            f"{', '.join(sorted(kinds))}). If it is a diffusion model alone, choose it as diffusion_model; "
            f"else choose the missing files in {inputs}"
        )


def check_pairing(files: dict[str, tuple[str, Path]], infos: dict[str, list[Any]], clip_type: str) -> None:
    """Refuse text encoders that cannot condition the diffusion model (they would load, and the sampler
    would fail later with a matmul shape error)."""
    model_input = "diffusion_model" if "diffusion_model" in files else "checkpoint"
    model = next((i for i in infos.get(model_input, []) if i.kind == "diffusion_model"), None)
    encoders = {
        name: next((i.family for i in infos[name] if i.kind == "text_encoder"), None)
        for name in files
        if name.startswith("text_encoder_")
    }
    if not encoders and model_input == "diffusion_model" and "checkpoint" in files:
        # no text_encoder_* chosen: the checkpoint's own encoders condition the separate diffusion model
        own = [i.family for i in infos.get("checkpoint", []) if i.kind == "text_encoder" and i.family]
        encoders = {"checkpoint": own[0]} if own else {}
    problem = encoder_pairing_problem(model.family if model else None, encoders)
    if problem:
        model_file = files[model_input][1].name
        raise OffloadError(
            f"Offload Loader: {problem} (diffusion model: {model_file} in {model_input}, clip_type "
            f"{clip_type}). Choose the text encoders this model was trained with"
        )


# What the OS says when it cannot map or allocate a file's pages: Linux's ENOMEM ("unable to mmap …
# Cannot allocate memory (12)"), Windows' page file error 1455, "not enough memory": the machine's RAM.
_MACHINE_MEMORY = (
    "cannot allocate memory", "unable to mmap", "mmap failed", "error 1455", "paging file",
    "not enough memory", "defaultcpuallocator: can't allocate", "std::bad_alloc",
)  # fmt: skip


def _memory_message(input_name: str, path: Path, exc: BaseException) -> str:
    detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    return (
        f"Offload Loader: input {input_name}: the machine ran out of memory to map or load {path.name} "
        f"({type(exc).__name__}: {detail}). The file is fine: free RAM (close other programs), on Windows "
        "enlarge the page file (System > Advanced > Performance > Virtual memory), or set this model's "
        "residency to disk so that it is read in parts"
    )


@contextlib.contextmanager
def loading(input_name: str, path: Path, infos: list[Any]) -> Iterator[None]:
    """The host's own load errors, named: a file whose architecture the host builds differently (another
    model family, a newer variant) fails in ``load_state_dict`` with a bare "size mismatch"."""
    try:
        yield
    except OffloadError:
        raise
    except MemoryError as exc:
        raise OffloadError(_memory_message(input_name, path, exc)) from exc
    except OSError as exc:  # Windows' page file error; any other OS error is no mismatch either
        if any(marker in str(exc).lower() for marker in _MACHINE_MEMORY):
            raise OffloadError(_memory_message(input_name, path, exc)) from exc
        raise
    except (
        RuntimeError,
        ValueError,
        KeyError,
        AttributeError,
        TypeError,
        IndexError,
        NotImplementedError,
    ) as exc:
        text = str(exc).lower()
        if "out of memory" in text:
            raise
        if any(marker in text for marker in _MACHINE_MEMORY):
            raise OffloadError(_memory_message(input_name, path, exc)) from exc
        families = ", ".join(f"{i.kind} {i.family}" for i in infos if i.family) or "an unknown model"
        lines = [line.strip() for line in str(exc).strip().splitlines()] or [type(exc).__name__]
        detail = next((line for line in lines if line.startswith("size mismatch")), lines[0])[:300]
        raise OffloadError(
            f"Offload Loader: input {input_name}: this ComfyUI could not load {path.name} (it looks like "
            f"{families}): {type(exc).__name__}: {detail}. The file does not match the architecture the "
            "host built for it: choose a file of a model family this ComfyUI supports (or update ComfyUI)"
        ) from exc
