"""The values that reach a node's inputs through links, computed the way the host computes them.

graph.py already resolves what the frontend resolves before it queues a prompt (PrimitiveNode widgets,
Reroutes, subgraph inputs and outputs, KJNodes' Get/Set). What is left are backend nodes the host runs
to produce a value; those evaluated here, mirroring the 2026 host's source:

- ``PrimitiveInt``/``Float``/``Boolean``/``String``/``StringMultiline`` (nodes_primitive.py): their
  ``value`` input, unchanged;
- ``ComfySwitchNode`` (nodes_logic.py): ``on_true`` if ``switch`` else ``on_false``, None when the chosen
  input is unconnected. Both branches are lazy: the host runs only the chosen one;
- ``ComfyMathExpression`` (nodes_math.py): ``simpleeval.simple_eval(expression, names, functions)``
  over its ``values.a``, ``values.b``, ... inputs (plus ``values``, their list) and the host's function
  table; outputs float, int and bool of the result. The same library is used, so the semantics match;
- ``ComfyNotNode``: ``not value``;
- utility nodes that size a workflow (``ResolutionSelector``), in node_outputs.py.

Anything else (a custom node's output, a value only known at run time) is *unknown*: the result says
which node stopped the evaluation and, where a switch with an unknown condition chooses between known
values, every value the input may take, so callers can pick a stated conservative one.

Bounded: a chain of 100,000 value nodes evaluates without recursion (the links a value reads are
evaluated first, in post-order, with an explicit stack), and an expression whose integers would grow
past ``MAX_RESULT_BITS`` (``4000000**4000000`` is 1 KB of JSON and minutes of one big-int operation that
holds the GIL) is not computed: it is unknown, "too large to evaluate before the run".
"""

from __future__ import annotations

import math
import string
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..units import cut_text
from .graph_types import Graph, Link
from .node_outputs import NODE_OUTPUTS
from .walk import fill

PRIMITIVES = frozenset(
    {"PrimitiveInt", "PrimitiveFloat", "PrimitiveBoolean", "PrimitiveString", "PrimitiveStringMultiline"}
)
SWITCH = "ComfySwitchNode"
MATH = "ComfyMathExpression"
NOT = "ComfyNotNode"
MAX_EXPONENT = 4000  # nodes_math.py's cap on pow()
# The largest integer an expression may build here: far above any size a workflow can use (the host's
# widgets stop at 2**53), far below what takes measurable time to compute.
MAX_RESULT_BITS = 4096


class TooCostly(ValueError):
    """An operation whose result would exceed MAX_RESULT_BITS: not computed."""


def _bits(value: Any) -> int:
    return abs(value).bit_length() if isinstance(value, int) else 0


def _refuse_large(bits: int) -> None:
    if bits > MAX_RESULT_BITS:
        raise TooCostly(f"too large to evaluate before the run (a {bits:,}-bit integer)")


def _bounded(operation: Any, size: Any) -> Any:
    """``operation`` refused where ``size(a, b)`` (the result's bits, for two integers) is too large."""

    def bounded(a: Any, b: Any) -> Any:
        if isinstance(a, int) and isinstance(b, int):
            _refuse_large(size(a, b))
        return operation(a, b)

    return bounded


def _power_bits(base: int, exp: int) -> int:
    return int(exp * math.log2(abs(base))) + 1 if exp > 0 and abs(base) > 1 else 0


def _bounded_round(number: Any, ndigits: Any = None) -> Any:
    # round(int, -n) builds 10**n: bounded like a power
    if isinstance(number, int) and isinstance(ndigits, int) and ndigits < 0:
        _refuse_large(_power_bits(10, -ndigits))
    return round(number) if ndigits is None else round(number, ndigits)


def _variadic_sum(*args: Any) -> Any:
    if len(args) == 1 and hasattr(args[0], "__iter__"):
        return sum(args[0])
    return sum(args)


def _safe_pow(base: Any, exp: Any) -> Any:
    if abs(exp) > MAX_EXPONENT:
        raise ValueError(f"Exponent {exp} exceeds maximum allowed ({MAX_EXPONENT})")
    if isinstance(base, int) and isinstance(exp, int):
        _refuse_large(_power_bits(base, exp))
    return pow(base, exp)


# nodes_math.py's MATH_FUNCTIONS, name for name.
MATH_FUNCTIONS = {
    "sum": _variadic_sum,
    "min": min,
    "max": max,
    "abs": abs,
    "round": _bounded_round,
    "pow": _safe_pow,
    "sqrt": math.sqrt,
    "ceil": math.ceil,
    "floor": math.floor,
    "log": math.log,
    "log2": math.log2,
    "log10": math.log10,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "int": int,
    "float": float,
}


@dataclass(frozen=True, slots=True)
class Value:
    """What an input receives: exact (``unknown`` empty, one candidate), or unknown with the values it
    may take (``candidates``, empty when nothing is known) and why (``unknown`` names the node)."""

    candidates: tuple[Any, ...]
    unknown: str = ""

    @property
    def exact(self) -> bool:
        return not self.unknown

    @property
    def value(self) -> Any:
        """The value when exact, else None."""
        return self.candidates[0] if self.exact else None


def math_expression(expression: str, values: dict[str, Any]) -> tuple[float, int, bool]:
    """ComfyMathExpression.execute: the FLOAT, INT and BOOL outputs. Raises ValueError (and whatever
    simpleeval raises) where the host's node fails."""
    if not expression.strip():
        raise ValueError("Expression cannot be empty.")
    names: dict[str, Any] = dict(values)
    names["values"] = list(values.values())
    result = _evaluator(names).eval(expression)
    if not isinstance(result, (int, float)):
        raise ValueError(f"must evaluate to a number, got {type(result).__name__}")
    as_float = float(result)
    if not math.isfinite(as_float):
        raise ValueError(f"non-finite result {result}")
    return as_float, int(result), bool(result)


def _evaluator(names: dict[str, Any]) -> Any:
    """simple_eval's evaluator with the host's functions, its operators bounded in cost (module doc)."""
    import ast

    import simpleeval  # a dependency of the pack; imported here to keep memory light

    operators = dict(simpleeval.DEFAULT_OPERATORS)
    operators[ast.Pow] = _bounded(simpleeval.safe_power, _power_bits)
    operators[ast.Mult] = _bounded(simpleeval.safe_mult, lambda a, b: _bits(a) + _bits(b))
    operators[ast.LShift] = _bounded(simpleeval.safe_lshift, lambda a, b: _bits(a) + max(b, 0))
    return simpleeval.SimpleEval(operators=operators, functions=MATH_FUNCTIONS, names=names)


def _node_name(graph: Graph, node_id: str) -> str:
    node = graph.nodes[node_id]
    return f"node {node_id} ({node.class_type}{f' {node.title!r}' if node.title else ''})"


class Evaluator:
    """Evaluates inputs of one graph; results are memoised per node output."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._memo: dict[Link, Value] = {}

    def input(self, node_id: str, name: str) -> Value | None:
        """What input ``name`` of the node receives; None when it has no such input."""
        inputs = self.graph.nodes[node_id].inputs
        return self.of(inputs[name]) if name in inputs else None

    def of(self, value: Any) -> Value:
        """A constant as is; a link evaluated."""
        return self.output(value) if isinstance(value, Link) else Value((value,))

    def output(self, link: Link) -> Value:
        if link not in self._memo:
            if link.node not in self.graph.nodes:
                return Value((), f"node {link.node}, which is not in the graph")
            # readers after what they read, without recursion (walk.fill); a cycle reads as unknown
            fill(link, self._memo, self._reads, self._evaluate, self._in_cycle)
        return self._memo[link]

    def _in_cycle(self, link: Link) -> Value:
        return Value((), f"{_node_name(self.graph, link.node)}, a dependency cycle")

    def _reads(self, link: Link) -> list[Link]:
        """The links ``_evaluate(link)`` may read (a switch: its condition and both branches)."""
        node = self.graph.nodes[link.node]
        kind, inputs = node.class_type, node.inputs
        if kind in PRIMITIVES or kind == NOT:
            names: Iterable[str] = ("value",) if link.output == 0 else ()
        elif kind == SWITCH:
            names = ("switch", "on_true", "on_false") if link.output == 0 else ()
        elif kind == MATH:
            names = inputs if link.output in (0, 1, 2) else ()
        else:
            names = ()
        found = (inputs.get(name) for name in names)
        return [v for v in found if isinstance(v, Link) and v.node in self.graph.nodes]

    def switch_taken(self, node_id: str) -> str | None:
        """The input a ComfySwitchNode passes on ("on_true"/"on_false"), None when its condition is
        unknown (or the node is no switch)."""
        if self.graph.nodes[node_id].class_type != SWITCH:
            return None
        condition = self.input(node_id, "switch")
        if condition is None or not condition.exact:
            return None
        return "on_true" if condition.value else "on_false"

    def live_inputs(self, node_id: str) -> dict[str, Any]:
        """The node's inputs without the switch branch the host never runs."""
        inputs = self.graph.nodes[node_id].inputs
        taken = self.switch_taken(node_id)
        if taken is None:
            return inputs
        skipped = "on_false" if taken == "on_true" else "on_true"
        return {name: value for name, value in inputs.items() if name != skipped}

    def _evaluate(self, link: Link) -> Value:
        node = self.graph.nodes[link.node]
        kind = node.class_type
        if kind in PRIMITIVES and link.output == 0:
            got = self.input(node.id, "value")
            return got if got is not None else Value((), f"{_node_name(self.graph, node.id)} has no value")
        if kind == SWITCH and link.output == 0:
            return self._switch(node.id)
        if kind == MATH and link.output in (0, 1, 2):
            return self._math(node.id, link.output)
        if kind == NOT and link.output == 0:
            got = self.input(node.id, "value")
            if got is None:
                return Value((True,))  # a missing input is None: not None is True
            return Value(tuple(not v for v in got.candidates), got.unknown)
        if kind in NODE_OUTPUTS:
            return self._node_output(node.id, link.output)
        return Value((), f"{_node_name(self.graph, node.id)} output {link.output}, which is not evaluated")

    def _node_output(self, node_id: str, output: int) -> Value:
        names, compute = NODE_OUTPUTS[self.graph.nodes[node_id].class_type]
        inputs: dict[str, Any] = {}
        for name in names:
            got = self.input(node_id, name)
            if got is None:
                continue  # the host's default applies
            if not got.exact:
                return Value((), got.unknown)
            inputs[name] = got.value
        outputs = compute(inputs)
        if outputs is None or not 0 <= output < len(outputs):
            return Value((), f"{_node_name(self.graph, node_id)}: inputs {inputs} are not what it accepts")
        return Value((outputs[output],))

    def _switch(self, node_id: str) -> Value:
        taken = self.switch_taken(node_id)
        if taken is not None:
            return self.input(node_id, taken) or Value((None,))
        condition = self.input(node_id, "switch")
        why = condition.unknown if condition else f"{_node_name(self.graph, node_id)} has no switch input"
        branches = [self.input(node_id, name) or Value((None,)) for name in ("on_false", "on_true")]
        if any(not b.exact and not b.candidates for b in branches):
            return Value((), why)
        candidates: list[Any] = []
        for c in (c for b in branches for c in b.candidates):
            if c not in candidates:  # by equality: values may be lists, which do not hash
                candidates.append(c)
        return Value(tuple(candidates), why)

    def _math(self, node_id: str, output: int) -> Value:
        inputs = self.graph.nodes[node_id].inputs
        expression = self.of(inputs.get("expression", "a + b"))
        if not expression.exact or not isinstance(expression.value, str):
            return Value((), expression.unknown or f"{_node_name(self.graph, node_id)} has no expression")
        names: dict[str, Any] = {}
        for letter in string.ascii_lowercase:  # the autogrow template's names, in its order
            if f"values.{letter}" not in inputs:
                continue
            got = self.of(inputs[f"values.{letter}"])
            if not got.exact:
                return Value((), got.unknown)
            names[letter] = got.value
        try:
            return Value((math_expression(expression.value, names)[output],))
        except Exception as exc:  # noqa: BLE001 - the host fails the node on any error; we only say why
            text = cut_text(repr(expression.value), 80)
            return Value((), f"{_node_name(self.graph, node_id)}: {text} fails ({cut_text(str(exc), 200)})")
