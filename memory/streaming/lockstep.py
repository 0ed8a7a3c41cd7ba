"""Run several calls of one streamed model so that each streamed block serves all of them at once.

When the host splits classifier-free guidance (cond and uncond) into separate model calls, running
the calls one after another uploads every streamed block once per call. Here each call runs in its
own thread, but only one thread runs at any moment (a baton passes between them): a call pauses when
it reaches a streamed block; once every call is paused, the block that comes next in the streamer's
order is uploaded once and the calls waiting for it compute through it one after another; it is
released when all of them have moved on (FlexGen's zig-zag schedule). Each call still executes its
own operations in its own order, with the caller's grad/inference mode, thread count, CUDA device
and stream, so every output is bit for bit what the call gives alone.

Peak memory: the calls' activations between blocks are all alive at once (a DiT's hidden state, a
UNet's skip connections); the large ones inside a block still exist for one call at a time.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch


class BlockRing(Protocol):
    """What lock step needs of a streamer (``BlockStreamer`` is one): the order its ring uploads blocks
    in, and binding a block to its uploaded slot and back."""

    def rank(self, block: int) -> int:
        """How many blocks the ring uploads before ``block`` from where it stands."""
        ...

    def acquire(self, block: int) -> None:
        """Bind ``block``'s tensors to its uploaded slot, waiting for the upload."""
        ...

    def release(self, block: int) -> None:
        """``block`` has computed: its tensors point back at host memory, its slot is reused."""
        ...


class _Cancelled(BaseException):
    """Raised inside a paused call to unwind it when another call failed (BaseException: model code's
    ``except Exception`` must not swallow it)."""


@dataclass(frozen=True)
class _ThreadState:
    """The caller thread's torch state that a new thread does not inherit."""

    grad: bool
    inference: bool
    threads: int
    cuda_device: int | None
    cuda_stream: Any
    autocast: tuple[tuple[str, torch.dtype], ...]

    @classmethod
    def capture(cls) -> _ThreadState:
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        try:
            autocast = tuple(
                (device, torch.get_autocast_dtype(device))
                for device in ("cuda", "cpu")
                if torch.is_autocast_enabled(device)
            )
        except (AttributeError, TypeError):  # torch < 2.4 has no per-device queries; hosts do not autocast
            autocast = ()
        return cls(
            torch.is_grad_enabled(),
            torch.is_inference_mode_enabled(),
            torch.get_num_threads(),
            torch.cuda.current_device() if cuda else None,
            torch.cuda.current_stream() if cuda else None,
            autocast,
        )

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        if torch.get_num_threads() != self.threads:  # reductions may split by thread count
            torch.set_num_threads(self.threads)
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.inference_mode(self.inference))
            stack.enter_context(torch.set_grad_enabled(self.grad))
            if self.cuda_device is not None:
                stack.enter_context(torch.cuda.device(self.cuda_device))
                stack.enter_context(torch.cuda.stream(self.cuda_stream))
            for device, dtype in self.autocast:
                stack.enter_context(torch.autocast(device, dtype=dtype))
            yield


@dataclass(eq=False)
class _Call:
    index: int
    fn: Callable[[], Any]
    context: contextvars.Context
    want: int | None = None  # the streamed block it is paused at
    holding: int | None = None  # the streamed block it computes with
    done: bool = False
    result: Any = None
    error: BaseException | None = None
    thread: threading.Thread | None = None


class LockStep:
    """One run of ``calls`` through ``streamer`` in lock step; the streamer's hooks call ``enter`` and
    ``leave`` from the calls' threads while ``run`` schedules them from the caller's thread."""

    def __init__(self, streamer: BlockRing, calls: Sequence[Callable[[], Any]]) -> None:
        self.streamer = streamer
        self.calls = [_Call(i, fn, contextvars.copy_context()) for i, fn in enumerate(calls)]
        self._cond = threading.Condition()
        self._turn: _Call | None = None  # the one call allowed to run; None: the scheduler runs
        self._local = threading.local()
        self._cancelled = False
        self._block: int | None = None  # the block of the current round, once acquired

    # --- the scheduler (caller's thread) ------------------------------------------------------------
    def run(self) -> list[Any]:
        state = _ThreadState.capture()
        for call in self.calls:
            call.thread = threading.Thread(
                target=self._main, args=(call, state), name=f"headroom-lockstep-{call.index}", daemon=True
            )
            call.thread.start()
        try:
            for call in self.calls:  # each runs up to its first streamed block (or to its end)
                if self._resume(call):
                    break
            while not self._failed():
                live = [c for c in self.calls if not c.done]
                if not live:
                    break
                block = min((c.want for c in live if c.want is not None), key=self.streamer.rank)
                for call in [c for c in live if c.want == block]:
                    if self._resume(call):
                        break
                self._end_round()
        finally:
            self._stop()
        failed = self._failed()
        if failed is not None:
            raise failed.error  # type: ignore[misc]
        return [c.result for c in self.calls]

    def _resume(self, call: _Call) -> bool:
        """Let ``call`` run until it pauses at a streamed block or returns; True if it failed."""
        with self._cond:
            self._turn = call
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._turn is None)
        return call.error is not None

    def _end_round(self) -> None:
        if self._block is not None:
            self.streamer.release(self._block)
            self._block = None

    def _failed(self) -> _Call | None:
        return next((c for c in self.calls if c.error is not None), None)

    def _stop(self) -> None:
        """Unwind every call still paused, wait for all threads, release the round's block."""
        self._cancelled = True
        while (paused := next((c for c in self.calls if not c.done), None)) is not None:
            self._resume(paused)  # it raises _Cancelled where it paused, or runs to its end
        for call in self.calls:
            assert call.thread is not None
            call.thread.join()
        self._end_round()

    # --- the calls (their own threads) -------------------------------------------------------------
    def _main(self, call: _Call, state: _ThreadState) -> None:
        self._local.call = call
        with self._cond:
            self._cond.wait_for(lambda: self._turn is call)
        try:
            if self._cancelled:
                raise _Cancelled
            with state.applied():
                call.result = call.context.run(call.fn)
        except _Cancelled:
            pass
        except BaseException as exc:  # re-raised in the caller's thread by run()
            call.error = exc
        finally:
            call.holding = None
            with self._cond:
                call.done = True
                self._turn = None
                self._cond.notify_all()

    def enter(self, block: int) -> None:
        """A call reached streamed ``block`` (its forward or one of its children's): pause until the
        block is on the device for it. Re-entering the block it holds (another child) is free."""
        call: _Call | None = getattr(self._local, "call", None)
        if call is None:
            raise RuntimeError("Headroom: a streamed block ran outside the calls being streamed together")
        if call.holding == block:
            return
        call.holding = None
        with self._cond:
            call.want = block
            self._turn = None
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._turn is call)
            call.want = None
        if self._cancelled:
            raise _Cancelled
        call.holding = block
        if self._block is None:  # the round's first call acquires the block (its upload, its slot)
            self.streamer.acquire(block)
            self._block = block

    def leave(self, block: int) -> None:
        """The block's own forward returned: a later call of it is a new use."""
        call: _Call | None = getattr(self._local, "call", None)
        if call is not None and call.holding == block:
            call.holding = None
