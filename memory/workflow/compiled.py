"""A streamed model under torch.compile's ``cudagraphs`` backend, found in the prompt before it runs.

The host's TorchCompileModel (backend "cudagraphs") on the same model chain as Stream Model or the
Streaming KSampler, on either side of it, cannot run: CUDA graphs replay the weights' device addresses
recorded at capture, while the streamer binds each streamed block's weights to a ring slot at every step.
The host's validation refuses it with this (nodes/host/budget_check.py), naming the compile node's
backend; the sampling-time check (nodes/host/sampling.cudagraphs_refusal) stays for what the prompt does
not say in so many words (a backend set through a link)."""

from __future__ import annotations

from collections.abc import Iterable

from ..names import NODE_IDS
from .graph import Graph, Link, reachable
from .walk import fill

COMPILE_NODE = "TorchCompileModel"  # comfy_extras/nodes_torch_compile.py, the same id on 0.3.64 and 0.33
STREAMING_NODES = frozenset({NODE_IDS["stream_model"], NODE_IDS["streaming_sampler"]})
REFUSAL = (
    "Headroom cannot stream a model compiled with torch.compile's 'cudagraphs' backend "
    "(TorchCompileModel): CUDA graphs replay the weights' device addresses recorded at capture, while "
    "streaming binds each streamed block's weights to a ring slot at every step. Set "
    "TorchCompileModel's backend to 'inductor', or sample without Stream Model / the Streaming KSampler."
)
# What a node's model chain holds nearest to it: (a streaming node's id, a cudagraphs compile's id)
Above = tuple[str | None, str | None]


def _model_source(graph: Graph, node_id: str) -> str | None:
    link = graph.nodes[node_id].inputs.get("model")
    return link.node if isinstance(link, Link) and link.node in graph.nodes else None


def cudagraphs_streamed(graph: Graph, outputs: Iterable[str]) -> tuple[str, str] | None:
    """``(TorchCompileModel id, streaming node id)`` for the first node, in prompt order, that the prompt
    may run (the outputs and what they read, lazy inputs too: a switch that would not take the compiled
    branch still counts) whose model chain (the node and the nodes its ``model`` input comes from, link by
    link) holds both a TorchCompileModel with the backend "cudagraphs" and Stream Model or the Streaming
    KSampler; None when none does."""
    needed = reachable(graph, outputs)
    runs = [n for n in graph.nodes if n in needed]  # in prompt order
    memo: dict[str, Above] = {}

    def compute(node_id: str) -> Above:
        node = graph.nodes[node_id]
        source = _model_source(graph, node_id)
        stream, compiled = memo.get(source, (None, None)) if source is not None else (None, None)
        if node.class_type in STREAMING_NODES:
            stream = node_id
        if node.class_type == COMPILE_NODE and node.inputs.get("backend") == "cudagraphs":
            compiled = node_id
        return stream, compiled

    def reads(node_id: str) -> list[str]:
        source = _model_source(graph, node_id)
        return [] if source is None else [source]

    for node_id in runs:
        stream, compiled = fill(node_id, memo, reads, compute, lambda _key: (None, None))
        if stream is not None and compiled is not None:
            return compiled, stream
    return None
