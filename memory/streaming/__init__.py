"""Block streaming: run a model whose blocks do not all fit in VRAM at the speed of the PCIe link.

``discovery`` finds a model's blocks, ``placement`` chooses which stay on the device, ``streamer``
keeps the rest in host memory allocated once and uploads them into a fixed ring of device slots
ahead of the block that needs them, ``lockstep`` lets the model calls of one step (cond and uncond
run separately) share each upload, and ``ledger`` accounts for every byte placed on the device.
"""

from . import gguf_storage as _gguf_storage  # noqa: F401  (registers ComfyUI-GGUF's weights with storage)
from .discovery import BlockLayout, discover_blocks
from .ledger import BudgetExceeded, DeviceLedger
from .placement import StreamingChoice, choose_streaming
from .stream_stats import StreamStats
from .streamer import BlockStreamer

__all__ = [
    "BlockLayout", "BlockStreamer", "BudgetExceeded", "DeviceLedger", "StreamStats", "StreamingChoice",
    "choose_streaming", "discover_blocks",
]  # fmt: skip
