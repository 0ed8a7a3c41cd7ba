"""Text-encoder block discovery: every encoder's layer list in a wrapper, by the host's names."""

from __future__ import annotations

from torch import nn

from comfyui_headroom.memory.streaming.text_layouts import discover_text_blocks, in_call_order


def _layers(n: int) -> nn.ModuleList:
    return nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.ModuleList([nn.Linear(4, 4)])) for _ in range(n))


class _Stack(nn.Module):
    def __init__(self, attr: str, n: int) -> None:
        super().__init__()
        setattr(self, attr, _layers(n))


def _flux_like() -> nn.Module:
    clip_l = nn.Module()
    clip_l.text_model = nn.Module()
    clip_l.text_model.encoder = _Stack("layers", 3)
    clip_l.text_model.embeddings = nn.Embedding(10, 4)
    t5 = nn.Module()
    t5.shared = nn.Embedding(10, 4)
    t5.encoder = _Stack("block", 2)
    wrapper = nn.Module()
    wrapper.clip_l, wrapper.t5xxl = clip_l, t5
    return wrapper


def test_every_encoder_streams_its_outer_layer_list_in_registration_order() -> None:
    layout = discover_text_blocks(_flux_like())
    assert layout.family == "text:clip+t5" and not layout.generic
    assert layout.names == (
        *(f"clip_l.text_model.encoder.layers.{i}" for i in range(3)),
        "t5xxl.encoder.block.0", "t5xxl.encoder.block.1",
    )  # fmt: skip


def test_the_list_that_runs_first_leads() -> None:
    layout = in_call_order(discover_text_blocks(_flux_like()), ["t5xxl.encoder.block"])
    assert layout.names[:2] == ("t5xxl.encoder.block.0", "t5xxl.encoder.block.1")
    assert layout.names[2] == "clip_l.text_model.encoder.layers.0"


def test_llama_and_qwen_vision_layers() -> None:
    qwen = nn.Module()
    qwen.model = _Stack("layers", 2)
    qwen.visual = _Stack("blocks", 2)
    assert discover_text_blocks(qwen).family == "text:llama+qwen_vl_vision"


def test_an_unknown_encoder_falls_back_to_the_generic_rule() -> None:
    other = _Stack("stages", 4)
    layout = discover_text_blocks(other)
    assert layout.generic and len(layout.blocks) == 4
