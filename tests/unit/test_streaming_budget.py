"""The device bytes a streamed sampling may place (memory.streaming.budget), without a host or a GPU."""

from __future__ import annotations

from comfyui_headroom.memory.streaming.budget import activation_reserve, streaming_budget

GiB = 2**30


def test_on_a_gpu_the_budget_is_what_the_host_reports_free_capped_by_the_users() -> None:
    free = 6 * GiB
    assert streaming_budget(None, device_free=free, model_bytes=12 * GiB, activation=GiB) == free
    assert streaming_budget(4 * GiB, device_free=free, model_bytes=12 * GiB, activation=GiB) == 4 * GiB
    assert streaming_budget(8 * GiB, device_free=free, model_bytes=12 * GiB, activation=GiB) == free


def test_on_a_cpu_the_budget_caps_the_placed_weights_and_auto_places_everything() -> None:
    assert streaming_budget(None, device_free=None, model_bytes=3 * GiB, activation=0) == 3 * GiB
    assert streaming_budget(None, device_free=None, model_bytes=3 * GiB, activation=5) == 3 * GiB + 5
    assert streaming_budget(GiB, device_free=None, model_bytes=3 * GiB, activation=0) == GiB
    assert streaming_budget(8 * GiB, device_free=None, model_bytes=3 * GiB, activation=0) == 8 * GiB


def test_the_activation_reserve_is_the_hosts_estimate_on_a_gpu_only() -> None:
    assert activation_reserve(700, on_gpu=True) == 700
    assert activation_reserve(700, on_gpu=False) == 0
    assert activation_reserve(0, on_gpu=True) == 0
