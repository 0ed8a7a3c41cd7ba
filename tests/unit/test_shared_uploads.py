"""The record/replay that lets a step's model calls share each streamed block's upload, on CPU with a
stand-in for the host's ``calc_cond_batch`` (which builds each call after the previous one returned) and
for the streamer's ``run_together``: no ComfyUI, no model."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import torch

from comfyui_headroom.memory.streaming.shared_uploads import SharedUploads, has_hooks, same_call


class Streamer:
    """The streamer's side: which blocks stream, and the calls it was asked to run together."""

    def __init__(self, streamed: list[int]) -> None:
        self.streamed = streamed
        self.together: list[int] = []  # len(calls) of each run_together

    def run_together(self, calls: list[Callable[[], Any]]) -> list[Any]:
        self.together.append(len(calls))
        return [call() for call in calls]


def apply_model(x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x * 1.7 + t) * cond  # not linear: a wrong pairing of outputs shows


class Host:
    """The host's calc_cond_batch: one model call per cond when it splits, one batched call when not.
    Every call goes through ``shared.model_call`` (the sampler's model function wrapper)."""

    def __init__(self, shared: SharedUploads | None = None) -> None:
        self.shared = shared
        self.computed = 0  # model calls really computed (apply_model runs)
        self.drift = 0.0  # added to inputs built in later runs of the host function (a mismatch)
        self.runs = 0

    def call_model(self, apply: Any, args: dict[str, Any]) -> torch.Tensor:
        self.computed += 1
        return apply(args["input"], args["timestep"], **args["c"])

    def model_call(self, args: dict[str, Any]) -> torch.Tensor:
        if self.shared is None:
            return self.call_model(apply_model, args)
        return self.shared.model_call(apply_model, args)

    def calc_cond_batch(self, model: Any, conds: list, x: torch.Tensor, t: torch.Tensor, split: bool) -> Any:
        self.runs += 1
        shift = self.drift * (self.runs - 1)
        if not split:
            c = torch.cat([cond[0]["c"] for cond in conds])
            args = {"input": torch.cat([x + shift] * len(conds)), "timestep": t, "c": {"cond": c}}
            return self.model_call({**args, "cond_or_uncond": list(range(len(conds)))}).chunk(len(conds))
        outs = []
        for i, cond in enumerate(conds):  # built one after the other, as the host does
            args = {"input": x + shift, "timestep": t, "c": {"cond": cond[0]["c"]}, "cond_or_uncond": [i]}
            outs.append(self.model_call(args))
        return outs


def conds(hooks: Any = None) -> list[list[dict[str, Any]]]:
    return [
        [{"c": torch.full((1, 4), 0.5), "hooks": hooks}],
        [{"c": torch.full((1, 4), -1.25), "hooks": hooks}],
    ]


def step(shared: SharedUploads, host: Host, split: bool, cs: list | None = None, seed: int = 0) -> Any:
    torch.manual_seed(seed)
    x, t = torch.randn(1, 4), torch.tensor([0.3])
    host.runs = 0

    def executor(model: Any, c: list, x_in: torch.Tensor, timestep: torch.Tensor, options: Any) -> Any:
        return host.calc_cond_batch(model, c, x_in, timestep, split)

    return shared.calc_cond_batch(executor, None, cs if cs is not None else conds(), x, t, {})


def stock(split: bool, cs: list | None = None, seed: int = 0) -> Any:
    torch.manual_seed(seed)
    x, t = torch.randn(1, 4), torch.tensor([0.3])
    return Host().calc_cond_batch(None, cs if cs is not None else conds(), x, t, split)


def recorder(streamer: Streamer | None) -> tuple[SharedUploads, Host]:
    host = Host()
    shared = SharedUploads(lambda: streamer, host.call_model)
    host.shared = shared
    return shared, host


def test_a_split_step_shares_the_upload_and_gives_the_hosts_result_bitwise() -> None:
    streamer = Streamer([0, 1])
    shared, host = recorder(streamer)
    out = step(shared, host, split=True)
    expected = stock(split=True)
    assert all(torch.equal(a, b) for a, b in zip(out, expected, strict=True))
    assert streamer.together == [2], "the two calls ran together"
    assert host.computed == 2, "each call computed once (the dry run computes nothing)"
    assert host.runs == 2, "the host's function ran twice: record, then replay"
    assert shared.counts() == {"model_calls": 2, "shared_steps": 1, "replay_mismatches": 0}


def test_after_a_single_call_steps_run_plainly_until_a_split_is_seen_again() -> None:
    streamer = Streamer([0])
    shared, host = recorder(streamer)
    step(shared, host, split=False)  # recorded (the first step may split), one call: nothing to share
    assert streamer.together == [] and host.runs == 2
    step(shared, host, split=True)  # plain: the host's function once, but a split is seen
    assert streamer.together == [] and host.runs == 1
    out = step(shared, host, split=True, seed=3)  # shared again
    assert streamer.together == [2] and host.runs == 2
    assert all(torch.equal(a, b) for a, b in zip(out, stock(split=True, seed=3), strict=True))
    assert shared.counts() == {"model_calls": 5, "shared_steps": 1, "replay_mismatches": 0}


def test_conds_with_hooks_run_plainly() -> None:
    streamer = Streamer([0, 1])
    shared, host = recorder(streamer)
    hooked = conds(hooks=object())
    out = step(shared, host, split=True, cs=hooked)
    assert streamer.together == [] and host.runs == 1 and host.computed == 2
    assert all(torch.equal(a, b) for a, b in zip(out, stock(split=True, cs=hooked), strict=True))


def test_with_nothing_streamed_sharing_stops_after_the_first_step() -> None:
    streamer = Streamer([])  # everything resident
    shared, host = recorder(streamer)
    step(shared, host, split=True)
    assert streamer.together == [2] and shared.shared_steps == 0
    step(shared, host, split=True)
    assert streamer.together == [2] and host.runs == 1, "no dry run: nothing to share"


def test_before_the_streamer_attaches_the_calls_run_one_by_one() -> None:
    shared, host = recorder(None)
    out = step(shared, host, split=True)
    assert all(torch.equal(a, b) for a, b in zip(out, stock(split=True), strict=True))
    assert host.computed == 2 and shared.shared_steps == 0
    step(shared, host, split=True)
    assert host.runs == 1, "no streamer streams: the next step runs plainly"


def test_a_replayed_call_that_differs_is_computed_again(caplog: pytest.LogCaptureFixture) -> None:
    streamer = Streamer([0, 1])
    shared, host = recorder(streamer)
    host.drift = 0.5  # the host builds other inputs in its second run (a ControlNet with state, say)
    with caplog.at_level(logging.WARNING, logger="headroom.streaming"):
        out = step(shared, host, split=True)
    assert shared.replay_mismatches == 2 and host.computed == 4
    assert "differs from its dry run" in caplog.text
    torch.manual_seed(0)
    x, t = torch.randn(1, 4), torch.tensor([0.3])
    second_run = [apply_model(x + 0.5, t, cond[0]["c"]) for cond in conds()]
    assert all(torch.equal(a, b) for a, b in zip(out, second_run, strict=True)), "what the host asked"


def test_an_error_in_the_dry_run_leaves_the_recorder_usable() -> None:
    streamer = Streamer([0, 1])
    shared, host = recorder(streamer)

    def failing(*args: Any) -> Any:
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        shared.calc_cond_batch(failing, None, conds(), torch.zeros(1, 4), torch.zeros(1), {})
    out = step(shared, host, split=True)  # not stuck in record mode
    assert all(torch.equal(a, b) for a, b in zip(out, stock(split=True), strict=True))


def test_same_call_and_has_hooks() -> None:
    a = {"input": torch.ones(2), "timestep": torch.zeros(1), "cond_or_uncond": [0]}
    assert same_call(a, dict(a))
    assert not same_call(a, {**a, "cond_or_uncond": [1]})
    assert not same_call(a, {**a, "input": torch.ones(2) * 2})
    assert not same_call(a, {**a, "timestep": torch.ones(1)})
    assert not has_hooks(conds()) and has_hooks(conds(hooks="lora")) and not has_hooks([None, []])


def test_arguments_a_newer_host_adds_pass_through_and_a_missing_conds_runs_unshared(
    caplog: pytest.LogCaptureFixture,
) -> None:
    streamer = Streamer([0, 1])
    shared, host = recorder(streamer)
    torch.manual_seed(0)
    x, t = torch.randn(1, 4), torch.tensor([0.3])
    seen = []

    def executor(
        model: Any, c: list, x_in: torch.Tensor, timestep: torch.Tensor, options: Any, **extra: Any
    ) -> Any:
        seen.append(extra)
        return host.calc_cond_batch(model, c, x_in, timestep, True)

    out = shared.calc_cond_batch(executor, None, conds(), x, t, {}, future_flag=True)
    assert all(e == {"future_flag": True} for e in seen) and len(seen) == 2  # dry run and replay
    torch.testing.assert_close(torch.stack(out), torch.stack(stock(True)), rtol=0, atol=0)
    with caplog.at_level(logging.WARNING, logger="headroom.streaming"):
        shared.calc_cond_batch(lambda **kw: "plain", something_else=1)
        shared.calc_cond_batch(lambda **kw: "plain", something_else=1)
    assert len(caplog.records) == 1 and "unshared" in caplog.text
