"""Predict the order in which current ComfyUI (0.3.6x) executes a graph.

A step-by-step mirror of the host's ``comfy_execution.graph.ExecutionList`` driven the way
``PromptExecutor.execute_async`` drives it:

- the output nodes are those ``validate_prompt`` selects: every output node of the prompt, collected
  into a ``set`` and returned as ``list(set)``. A set of strings iterates in hash order, which Python
  randomises per process (PYTHONHASHSEED), so across processes the host's order of outputs is not
  fixed. Built the same way here, the list equals the host's when both run in one process (the pack
  inside ComfyUI); anywhere else pass ``outputs`` (the ``execute_outputs`` the executor was given);
- ``add_node`` walks inputs depth-first with an explicit stack, so the order in which nodes become
  pending, and with it every tie between ready nodes, follows the prompt's input order;
- each step picks among the ready nodes with ``ux_friendly_pick_node``: an output (or async) node,
  else one whose result an output node is waiting for, else one two hops from an output, else the
  first ready node;
- the host caches by input signature (caching.py): class, constant inputs and the same for every
  ancestor, so two nodes with equal signatures share one cache entry. The second one's output is in
  the cache once the first has run: it is skipped like any cached node. This is mirrored exactly,
  with one conservative choice: an unknown class counts as unique (custom nodes often make
  IS_CHANGED return NaN), as do the classes whose signature holds their node id. Known classes with
  IS_CHANGED (LoadImage & co.) hash the file their inputs name, so equal inputs count as equal;
- cached nodes are never added as dependencies; a cached output node is still staged (the host
  re-sends its UI) but does not execute, so it is left out of the result. Nodes that finished count as
  cached from then on, as the host's live output cache does.

Lazy inputs: the node is first staged without them, as the host does; then its ``check_lazy_status``
asks for the lazy inputs it needs and the node waits for them. ComfySwitchNode's is mirrored: when its
condition evaluates (values.py) it asks only for the chosen branch, so the other branch's nodes (and
the models only they load) never run. Any other lazy node, or a switch whose condition is not known
here, is assumed to ask for every lazy input that is linked (a node that needs fewer inputs only makes
the real order shorter). The host sends an ``executing`` event for that first
staging too; the prediction lists each node once, where it really executes.

``cached`` is what the host reports in its ``execution_cached`` event (ids whose output it holds).

Not modelled: async nodes whose work is still pending when they return (they are assumed to finish at
once), node expansion (nodes that return a new subgraph at run time), outputs that fail validation
(assumed valid), and ``--cache-none`` (the default classic cache and ``--cache-lru`` both key by
signature as above).
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Hashable, Iterable
from typing import Any

from ..deadline import check_time
from .graph import Graph, Link, WorkflowError
from .node_types import lookup
from .values import Evaluator


def select_outputs(graph: Graph) -> list[str]:
    """The output node ids ``validate_prompt`` returns, built the way it builds them (see module doc)."""
    outputs: set[str] = set()
    for node_id in graph.nodes:
        if graph.is_output(node_id):
            outputs.add(node_id)
    good: set[str] = set()
    for node_id in outputs:
        good.add(node_id)
    return list(good)


def _canonical(value: Any) -> Hashable:
    """A hashable stand-in for a constant, equal where the host's to_hashable() values are equal."""
    if isinstance(value, (int, float, str, bool, type(None))):
        return value
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), _canonical(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(_canonical(v) for v in value))
    return object()  # the host's Unhashable: equal to nothing


class _Signatures:
    """Which nodes share a cache entry: equal input signatures (caching.CacheKeySetInputSignature).

    A Merkle hash of each node's ancestry is computed first; only nodes whose hashes collide get the
    host's exact signature (its ancestors numbered in the order a sorted-key walk meets them).
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._merkle: dict[str, Hashable] = {}
        groups: dict[Hashable, list[str]] = defaultdict(list)
        for node_id in graph.nodes:
            groups[self.merkle(node_id)].append(node_id)
        self.keys: dict[str, Hashable] = {node_id: node_id for node_id in graph.nodes}
        for members in groups.values():
            if len(members) > 1:
                for node_id in members:
                    self.keys[node_id] = ("signature", self.exact(node_id))

    def own(self, node_id: str) -> tuple[str, ...]:
        node = self.graph.nodes[node_id]
        known = lookup(node.class_type)
        if known is None or known.unique_signature:
            return (node.class_type, node_id)
        return (node.class_type,)

    def _links(self, node_id: str) -> list[tuple[str, Link]]:
        """(input name, link) in sorted input order, links to absent nodes left out."""
        items = sorted(self.graph.nodes[node_id].inputs.items())
        return [(k, v) for k, v in items if isinstance(v, Link) and v.node in self.graph.nodes]

    def merkle(self, root: str) -> Hashable:
        # Post-order without recursion: chains can be thousands of nodes long.
        stack, visiting = [(root, False)], set()
        while stack:
            node_id, expanded = stack.pop()
            if node_id in self._merkle or (not expanded and node_id in visiting):
                continue  # done, or met again through a cycle (the cycle is reported later)
            if not expanded:
                visiting.add(node_id)
                stack.append((node_id, True))
                stack += [(v.node, False) for _, v in self._links(node_id) if v.node not in self._merkle]
                continue
            parts: list[tuple[Hashable, ...]] = []
            for name, value in sorted(self.graph.nodes[node_id].inputs.items()):
                if isinstance(value, Link):
                    parts.append((name, "link", self._merkle.get(value.node, object()), value.output))
                else:
                    parts.append((name, _canonical(value)))
            self._merkle[node_id] = hash((self.own(node_id), tuple(parts)))
            visiting.discard(node_id)
        return self._merkle[root]

    def exact(self, node_id: str) -> tuple[Hashable, ...]:
        """The host's signature: the node, then its ancestors in the order a depth-first walk over
        sorted input names first meets them, links written as ("ANCESTOR", index, socket)."""
        ancestors: list[str] = []
        index: dict[str, int] = {}
        stack = [iter(self._links(node_id))]
        while stack:
            for _, value in stack[-1]:
                if value.node not in index:
                    ancestors.append(value.node)
                    index[value.node] = len(ancestors) - 1
                    stack.append(iter(self._links(value.node)))
                    break
            else:
                stack.pop()

        def immediate(current: str) -> Hashable:
            parts: list[tuple[str, Hashable]] = []
            for name, value in sorted(self.graph.nodes[current].inputs.items()):
                if isinstance(value, Link):
                    ref = index.get(value.node, object())  # a link to an absent node matches nothing
                    parts.append((name, ("ANCESTOR", ref, value.output)))
                else:
                    parts.append((name, _canonical(value)))
            return (self.own(current), tuple(parts))

        return tuple(immediate(n) for n in [node_id, *ancestors])


class _ExecutionList:
    """The host's ExecutionList over a Graph, with the executor's cache as a set of node ids."""

    def __init__(self, graph: Graph, cached: Iterable[str]) -> None:
        self.graph = graph
        self.signatures = _Signatures(graph)
        # The host's output cache, by signature: it grows as nodes complete.
        self.cache_keys = {self.signatures.keys[node_id] for node_id in cached}
        # The host's pendingNodes is an insertion-ordered dict; the sequence number keeps that order
        # for the ready set, which is kept up to date instead of being recomputed every step.
        self.pending: dict[str, int] = {}
        self.block_count: dict[str, int] = {}
        self.ready: set[str] = set()
        self.sequence = itertools.count()
        self.blocking: dict[str, dict[str, dict[int, bool]]] = {}
        self.blocked_by: dict[str, set[str]] = defaultdict(set)  # the reverse of blocking
        self.lazy_done: set[str] = set()
        self.values = Evaluator(graph)

        # Per-node facts the picking rule asks for over and over.
        self.outputs = {node_id for node_id in graph.nodes if graph.is_output(node_id)}
        self.first = self.outputs | {n for n, node in graph.nodes.items() if _is_async(node.class_type)}
        # ux_friendly_pick_node scans the ready nodes in pending order three times; scanning them every
        # step is quadratic on big prompts. Instead each of its rules keeps a heap of (sequence, node)
        # for the ready nodes it accepts; stale entries are dropped when they reach the top. A node's
        # rules only ever start to hold while it is ready (edges are only removed when a node
        # completes, and the nodes it blocks cannot complete before it), so a node is pushed when it
        # becomes ready and again when a new edge makes a rule hold.
        self.blocks_output: dict[str, int] = defaultdict(int)  # outputs in blocking[node]
        self.blocks_near: dict[str, int] = defaultdict(int)  # b in blocking[node] with blocks_output[b]
        self.heaps: tuple[list[tuple[int, str]], ...] = ([], [], [], [])

    def lazy_inputs(self, node_id: str) -> frozenset[str]:
        known = lookup(self.graph.nodes[node_id].class_type)
        return known.lazy_inputs if known is not None else frozenset()

    def add_node(self, node_id: str) -> None:
        stack, links = [node_id], []
        while stack:
            unique_id = stack.pop()
            if unique_id in self.pending:
                continue
            self.pending[unique_id] = next(self.sequence)
            self.block_count[unique_id] = 0
            self.blocking[unique_id] = {}
            self.make_ready(unique_id)
            lazy = self.lazy_inputs(unique_id)
            for name, value in self.graph.nodes[unique_id].inputs.items():
                if not isinstance(value, Link) or value.node not in self.graph.nodes:
                    continue  # constants; links to absent nodes (the parser warned about them)
                if name not in lazy and not self.is_cached(value.node):
                    stack.append(value.node)
                    links.append((value.node, value.output, unique_id))
        for link in links:
            self.add_strong_link(*link)

    def is_cached(self, node_id: str) -> bool:
        return self.signatures.keys[node_id] in self.cache_keys

    def add_strong_link(self, from_id: str, socket: int, to_id: str) -> None:
        if self.is_cached(from_id):
            return
        self.add_node(from_id)
        if to_id not in self.blocking[from_id]:
            self.blocking[from_id][to_id] = {}
            self.blocked_by[to_id].add(from_id)
            self.block_count[to_id] += 1
            self.ready.discard(to_id)
            if to_id in self.outputs:
                self.blocks_output[from_id] += 1
                if self.blocks_output[from_id] == 1:
                    self.push(from_id, 1)
                    for before in self.blocked_by[from_id]:
                        self.blocks_near[before] += 1
                        self.push(before, 2)
            if self.blocks_output[to_id]:
                self.blocks_near[from_id] += 1
                self.push(from_id, 2)
        self.blocking[from_id][to_id][socket] = True

    def make_ready(self, node_id: str) -> None:
        self.ready.add(node_id)
        for rule, holds in enumerate(self.rules(node_id)):
            if holds:
                self.push(node_id, rule)

    def rules(self, node_id: str) -> tuple[bool, bool, bool, bool]:
        """Which of ux_friendly_pick_node's rules accept the node (the last accepts any)."""
        return (node_id in self.first, self.blocks_output[node_id] > 0, self.blocks_near[node_id] > 0, True)

    def push(self, node_id: str, rule: int) -> None:
        if node_id in self.ready:
            heapq.heappush(self.heaps[rule], (self.pending[node_id], node_id))

    def pick(self) -> str | None:
        """ux_friendly_pick_node over the ready nodes in pending order; None when none is ready.

        The first ready node an output (or async) node, else the first that blocks an output, else the
        first that blocks a node blocking an output, else the first ready node.
        """
        for rule, heap in enumerate(self.heaps):
            while heap:
                sequence, node_id = heap[0]
                if (
                    self.pending.get(node_id) == sequence
                    and node_id in self.ready
                    and self.rules(node_id)[rule]
                ):
                    return node_id
                heapq.heappop(heap)
        return None

    def needs_lazy(self, node_id: str) -> bool:
        """The conservative check_lazy_status: link every lazy input not yet evaluated; True if any."""
        if node_id in self.lazy_done:
            return False
        self.lazy_done.add(node_id)
        inputs = self.graph.nodes[node_id].inputs
        # A switch whose condition is known asks only for its chosen branch (check_lazy_status).
        lazy = self.lazy_inputs(node_id)
        taken = self.values.switch_taken(node_id)
        if taken is not None:
            lazy = lazy & {taken}
        wanted = [
            name
            for name, value in inputs.items()
            if name in lazy
            and isinstance(value, Link)
            and value.node in self.graph.nodes
            and not self.is_cached(value.node)
        ]
        # The host collects the requested names in a set and links them in its iteration order.
        for name in set(wanted):
            value = inputs[name]
            self.add_strong_link(value.node, value.output, node_id)
        return bool(wanted)

    def complete(self, node_id: str) -> None:
        del self.pending[node_id]
        self.ready.discard(node_id)
        for blocked in self.blocking.pop(node_id):
            self.blocked_by[blocked].discard(node_id)
            self.block_count[blocked] -= 1
            if self.block_count[blocked] == 0:
                self.make_ready(blocked)
        self.cache_keys.add(self.signatures.keys[node_id])

    def cycle(self) -> list[str]:
        return [node_id for node_id in self.pending if self.block_count[node_id] > 0]


def _is_async(class_type: str) -> bool:
    known = lookup(class_type)
    return known is not None and known.is_async


def predict_order(
    graph: Graph, cached: frozenset[str] = frozenset(), outputs: list[str] | None = None
) -> list[str]:
    """Node ids in the order the current host executes them, cached nodes left out.

    ``cached``: ids whose outputs the host already holds; ``outputs``: the output ids the executor is
    given (default: what validate_prompt selects). Raises WorkflowError on a dependency cycle or an
    output id that is not in the graph.
    """
    targets = select_outputs(graph) if outputs is None else list(outputs)
    missing = [node_id for node_id in targets if node_id not in graph.nodes]
    if missing:
        raise WorkflowError(f"output node(s) {missing} are not in the graph")
    execution = _ExecutionList(graph, (node_id for node_id in cached if node_id in graph.nodes))
    for node_id in targets:
        execution.add_node(node_id)
    order: list[str] = []
    while execution.pending:
        check_time()
        picked = execution.pick()
        if picked is None:
            stuck = execution.cycle()
            raise WorkflowError(f"dependency cycle among nodes {_names(graph, stuck)}")
        node_id = picked
        # The host's execute() returns at once for a node whose output is cached by now.
        if not execution.is_cached(node_id):
            if execution.needs_lazy(node_id):
                continue  # re-queued, now waiting for its lazy inputs
            order.append(node_id)
        execution.complete(node_id)
    return order


def _names(graph: Graph, node_ids: list[str]) -> str:
    return ", ".join(f"{n} ({graph.nodes[n].class_type})" for n in node_ids)


def output_signatures(graph: Graph, node_ids: Iterable[str]) -> set[Hashable]:
    """The cache signatures of ``node_ids``: what the host's output cache holds after they ran."""
    signatures = _Signatures(graph)
    return {signatures.merkle(n) for n in node_ids if n in graph.nodes}


def predict_cached(graph: Graph, held: set[Hashable]) -> frozenset[str]:
    """Nodes whose output the host already holds: same class, inputs and ancestry as one it ran before
    (``held``, from ``output_signatures``). A wrong guess costs only a re-plan when the node starts."""
    signatures = _Signatures(graph)
    return frozenset(n for n in graph.nodes if signatures.merkle(n) in held)
