"""What the Stream Model and Stream CLIP nodes share: one required input (the thing to stream) beside the
streaming inputs, the budget checked at queue time, and the node's settings and error messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from ..memory.streaming import BudgetExceeded
from .common import CATEGORY, node_vram_budget, streaming_inputs, validate_vram_budget
from .host import node_text, sampling


class StreamNode:
    """A V1 node: ``TARGET`` = (input name, socket type, tooltip); the subclass's ``stream`` calls
    ``_streamed`` with the host function that makes the streaming clone."""

    DISPLAY_NAME: ClassVar[str]
    TARGET: ClassVar[tuple[str, str, str]]
    CATEGORY = f"{CATEGORY}/sampling"
    FUNCTION = "stream"
    PER: ClassVar[str] = "step"  # what one run of the streamed model is: a sampling step, an encode

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        name, kind, tooltip = cls.TARGET
        return {"required": {name: (kind, {"tooltip": tooltip})}, "optional": streaming_inputs()}

    @classmethod
    def VALIDATE_INPUTS(cls, vram_budget: Any = "auto") -> bool | str:
        """A bad vram_budget fails when the prompt is queued, before any node runs."""
        return validate_vram_budget(vram_budget, cls.DISPLAY_NAME)

    def _streamed(
        self,
        make: Callable[[Any, Any], tuple[Any, Any]],
        target: Any,
        vram_budget: str,
        prefetch: int,
        resident_blocks: int,
        pin_memory: bool,
    ) -> dict[str, Any]:
        settings = sampling.StreamSettings(
            node_vram_budget(vram_budget, self.DISPLAY_NAME),
            None if prefetch < 0 else prefetch,
            None if resident_blocks < 0 else resident_blocks,
            pin_memory,
        )
        try:
            streamed, stream = make(target, settings)
        except BudgetExceeded as exc:
            raise ValueError(
                f"{self.DISPLAY_NAME}: input vram_budget {vram_budget!r}: {exc}. Raise vram_budget, use "
                "auto, or lower prefetch."
            ) from None
        except ValueError as exc:
            raise ValueError(f"{self.DISPLAY_NAME}: input {self.TARGET[0]}: {exc}") from None
        node_text.own(stream, self.describe)
        armed = "armed: streams when a node runs it; what it streamed shows here after that node"
        return {"ui": {"text": [armed]}, "result": (streamed,)}

    def describe(self, run: Any) -> str:
        """What one run of the streamed model did, for the node: "streamed 40/48 blocks by Headroom,
        9.1 GiB per step, from pinned RAM", why nothing streamed, or that everything fit."""
        line = sampling.streamed_line(run.summary, per=self.PER)
        return line or run.note or "everything fits: nothing streamed"
