"""Keeping the host copies across the host's own load (``nodes/host/host_load``): what the host loaded
unchanged points back at its original before ``partially_unload``, so the unload copies nothing; a
patched or converted weight is left to the host. Without a GPU, the host's load is stood in for by a
copy of the tensor (the ``loaded`` predicate knows them); the unload by ``Module.to("cpu")``."""

from __future__ import annotations

import torch
from torch import nn

from comfyui_headroom.nodes.host import host_load


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 4))
    model[1].register_buffer("scale", torch.ones(8))
    return model


def test_what_the_host_loaded_unchanged_points_back_at_its_original() -> None:
    model = _model()
    before = {k: (t.data_ptr(), t.detach().clone()) for k, t in model.state_dict(keep_vars=True).items()}
    captured = host_load.capture(model)
    assert set(captured) == set(before)
    for m in (model[0], model[1]):  # the host's load of two modules; the third stays on the host
        m._apply(lambda t: t.clone())
    model[1].weight.data = model[1].weight.data.to(torch.float16)  # converted on the way: not the same
    ptrs = {t.data_ptr() for t in captured.values()}
    nbytes = host_load.give_back(
        model,
        captured,
        patches={"2.bias": [], "1.bias": ["a lora"]},
        loaded=lambda t: t.data_ptr() not in ptrs,
    )
    assert nbytes == (4 * 8 + 8 + 8) * 4, "layer 0 weight and bias, layer 1 scale"
    assert (
        model[0].weight.data_ptr() == before["0.weight"][0]
        and model[0].bias.data_ptr() == before["0.bias"][0]
    )
    assert model[1].scale.data_ptr() == before["1.scale"][0]
    assert model[1].weight.dtype == torch.float16 and model[1].bias.data_ptr() != before["1.bias"][0], (
        "host's"
    )
    model[0].to("cpu")  # the host's partially_unload: nothing is copied
    assert model[0].weight.data_ptr() == before["0.weight"][0]
    assert torch.equal(model[0].weight, before["0.weight"][1])
    assert model[2].weight.data_ptr() == before["2.weight"][0], "never loaded: untouched"


def test_what_is_on_a_device_is_not_captured_and_nothing_comes_back_without_a_capture() -> None:
    model = _model()
    model[0].to("meta")
    captured = host_load.capture(model)
    assert set(captured) == {"1.weight", "1.bias", "1.scale", "2.weight", "2.bias"}
    assert host_load.give_back(model, {}, None) == 0
    assert model[0].weight.device.type == "meta"


class _Patcher:
    """The current hosts' ``ModelPatcher.load`` signature, recording its calls."""

    def __init__(self, load_device: str = "cuda:0", dynamic: bool = False) -> None:
        self.calls: list[tuple] = []
        self.load_device, self.model, self._dynamic = load_device, _model(), dynamic

    def load(self, device_to=None, lowvram_model_memory=0, force_patch_weights=False, full_load=False):  # noqa: ANN001, ANN201
        self.calls.append((device_to, lowvram_model_memory, force_patch_weights, full_load))

    def is_dynamic(self) -> bool:
        return self._dynamic


def test_the_hosts_load_held_back_loads_nothing_until_undone() -> None:
    patcher = _Patcher()
    undo = host_load.hold_back(patcher)
    assert undo is not None and host_load.hold_back(patcher) is None, "held back once"
    patcher.load("cuda:0", 0, True, True)  # patch_model's full load
    patcher.load("cuda:0", lowvram_model_memory=5 << 30, force_patch_weights=False, full_load=True)
    patcher.load("cuda:0")
    assert patcher.calls == [
        ("cuda:0", 1, True, False),
        ("cuda:0", 1, False, False),
        ("cuda:0", 1, False, False),
    ]
    undo()
    assert "load" not in vars(patcher)
    patcher.load("cuda:0", 0, False, True)
    assert patcher.calls[-1] == ("cuda:0", 0, False, True)


def test_nothing_is_held_back_on_a_cpu_for_a_dynamic_patcher_or_another_signature() -> None:
    assert host_load.before_host_load(_Patcher("cpu")) == ({}, None)
    assert host_load.before_host_load(_Patcher(dynamic=True)) == ({}, None)
    captured, undo = host_load.before_host_load(_Patcher())
    assert set(captured) == set(_model().state_dict()) and undo is not None

    class Legacy:  # the 2024 host: patch_model_lowvram, no load(lowvram_model_memory, full_load)
        load_device, model = "cuda:0", _model()

        def load(self, device_to=None):  # noqa: ANN001, ANN201
            raise AssertionError("not called")

    assert host_load.hold_back(Legacy()) is None
