"""A streaming node's VRAM budget that the node would refuse when it runs is refused at the host's own
validation (issue #43): the node's VALIDATE_INPUTS sees only the budget's text, never the model (a link),
so the rule that needs both (memory/planning/pipeline.check_stream_budgets: the model's non-block
weights plus one slot for its largest block) runs where the whole prompt is, in Headroom's hook of
``execution.validate_prompt`` (nodes/host/events.py), and adds a node error as the host's own validation
would. Only prompts whose streaming nodes name a budget are extracted (a fraction of a second, within
``LIMIT_S``); anything that goes wrong leaves the host's answer as it was (fail open, one log line).
A TorchCompileModel with the "cudagraphs" backend on a streamed model's chain is refused there too, on
its ``backend`` input (memory/workflow/compiled.py), before anything loads."""

from __future__ import annotations

import logging

from ...memory.deadline import PlanTimeout
from ...memory.planning.costmodel import Hardware
from ...memory.planning.pipeline import BudgetRefused, plan_workflow
from ...memory.workflow.compiled import REFUSAL as CUDAGRAPHS_REFUSAL
from ...memory.workflow.compiled import STREAMING_NODES, cudagraphs_streamed
from ...memory.workflow.graph import WorkflowError, parse_workflow, reachable
from .lookups import HOST_MODEL_FILES

_log = logging.getLogger("headroom")
LIMIT_S = 2.0  # extraction only: far more than a real workflow takes


# The host's validate_prompt answer: (ok, error, the output ids it runs, node errors)
Answer = tuple[bool, object, list[str], dict[str, object]]


def _answer(answer: object) -> Answer | None:
    """The host's answer read as a valid one that Headroom may refuse; None when it refused already, or
    the answer is of another shape (left as it is)."""
    if not isinstance(answer, (tuple, list)) or len(answer) != 4 or not answer[0]:
        return None
    ok, error, outputs, node_errors = answer
    outputs = [str(o) for o in outputs] if isinstance(outputs, (list, tuple, set, frozenset)) else []
    return bool(ok), error, outputs, dict(node_errors) if isinstance(node_errors, dict) else {}


def _names_a_budget(node: object) -> bool:
    if not isinstance(node, dict) or node.get("class_type") not in STREAMING_NODES:
        return False
    budget = (node.get("inputs") or {}).get("vram_budget")
    return isinstance(budget, str) and budget.strip().lower() not in ("", "auto")


def _compiles_cudagraphs(node: object) -> bool:
    inputs = node.get("inputs") if isinstance(node, dict) else None
    return isinstance(inputs, dict) and inputs.get("backend") == "cudagraphs"


def _refused(
    prompt: dict[str, object],
    valid: Answer,
    node_id: str,
    input_name: str,
    message: str,
    details: str,
    dependent: list[str] | None = None,
) -> Answer:
    """The host's validation answer refusing ``node_id``'s input, as its own validation words one;
    ``dependent``: the outputs that need the node (None: every output the host kept)."""
    _ok, _error, outputs, node_errors = valid
    outputs = outputs if dependent is None else dependent
    node = prompt.get(node_id)
    errors = dict(node_errors)
    errors[node_id] = {
        "errors": [{"type": "value_not_valid", "message": message, "details": details,
                    "extra_info": {"input_name": input_name}}],
        "dependent_outputs": list(outputs),
        "class_type": node.get("class_type") if isinstance(node, dict) else None,
    }  # fmt: skip
    failed = {"type": "prompt_outputs_failed_validation", "message": "Prompt outputs failed validation",
              "details": details, "extra_info": {}}  # fmt: skip
    return (False, failed, [], errors)


def refuse_at_validation(prompt: object, answer: object) -> object:
    """The host's validation answer, turned into a refusal naming the node and its input when the prompt
    streams a model it cannot stream (``refuse_cudagraphs``, ``refuse_unstreamable``); else unchanged."""
    return refuse_unstreamable(prompt, refuse_cudagraphs(prompt, answer))


def refuse_cudagraphs(prompt: object, answer: object) -> object:
    """A TorchCompileModel with the "cudagraphs" backend on a streamed model's chain, refused on its
    ``backend`` input (memory/workflow/compiled.py); else the answer unchanged."""
    valid = _answer(answer)
    if valid is None or not isinstance(prompt, dict) or not any(map(_compiles_cudagraphs, prompt.values())):
        return answer
    try:
        graph = parse_workflow(prompt)
        found = cudagraphs_streamed(graph, valid[2])
    except WorkflowError:
        # a prompt the parser reads more strictly than the host (links checked against the pack's own
        # node table, not against the outputs the host kept): the sampling-time check still refuses
        return answer
    except Exception:  # fail open: the sampling-time check still refuses
        _log.warning("Headroom: the cudagraphs check at validation failed; the host's answer stands",
                     exc_info=True)  # fmt: skip
        return answer
    if found is None:
        return answer
    compiled, stream = found
    _log.error("Headroom: node %s (TorchCompileModel) compiles the model node %s streams: %s",
               compiled, stream, CUDAGRAPHS_REFUSAL)  # fmt: skip
    message = "Headroom: a streamed model cannot use the 'cudagraphs' backend"
    dependent = [o for o in valid[2] if compiled in reachable(graph, [o])]  # as the host lists them
    return _refused(prompt, valid, compiled, "backend", message, CUDAGRAPHS_REFUSAL, dependent)


def refuse_unstreamable(prompt: object, answer: object) -> object:
    """The host's validation answer, turned into a refusal naming the node and its input when a streaming
    node's budget cannot stream its model; else unchanged."""
    valid = _answer(answer)
    if valid is None or not isinstance(prompt, dict) or not any(map(_names_a_budget, prompt.values())):
        return answer
    try:
        plan_workflow(prompt, None, Hardware.pcie(4), models_dir=HOST_MODEL_FILES, time_limit_s=LIMIT_S)
        return answer
    except BudgetRefused as refused:
        message = "Headroom: this VRAM budget cannot stream the model"
        return _refused(prompt, valid, refused.node_id, "vram_budget", message, str(refused))
    except (ValueError, KeyError, TypeError, PlanTimeout, RecursionError, OverflowError):
        return answer  # what the plan cannot read, the preflight says; the host's answer stands
    except Exception:  # fail open: the host's own validation decides
        _log.warning(
            "Headroom: the budget check at validation failed; the host's answer stands", exc_info=True
        )
        return answer
