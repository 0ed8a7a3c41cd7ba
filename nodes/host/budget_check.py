"""A streaming node's VRAM budget that the node would refuse when it runs is refused at the host's own
validation (issue #43): the node's VALIDATE_INPUTS sees only the budget's text, never the model (a link),
so the rule that needs both (memory/planning/pipeline.check_stream_budgets: the model's non-block
weights plus one slot for its largest block) runs where the whole prompt is, in Headroom's hook of
``execution.validate_prompt`` (nodes/host/events.py), and adds a node error as the host's own validation
would. Only prompts whose streaming nodes name a budget are extracted (a fraction of a second, within
``LIMIT_S``); anything that goes wrong leaves the host's answer as it was (fail open, one log line)."""

from __future__ import annotations

import logging
from typing import Any

from ...memory.deadline import PlanTimeout
from ...memory.names import NODE_IDS
from ...memory.planning.costmodel import Hardware
from ...memory.planning.pipeline import BudgetRefused, plan_workflow
from .lookups import HOST_MODEL_FILES

_log = logging.getLogger("headroom")
STREAM_NODES = frozenset({NODE_IDS["streaming_sampler"], NODE_IDS["stream_model"]})
LIMIT_S = 2.0  # extraction only: far more than a real workflow takes


def _names_a_budget(node: Any) -> bool:
    if not isinstance(node, dict) or node.get("class_type") not in STREAM_NODES:
        return False
    budget = (node.get("inputs") or {}).get("vram_budget")
    return isinstance(budget, str) and budget.strip().lower() not in ("", "auto")


def refuse_unstreamable(prompt: Any, answer: Any) -> Any:
    """The host's validation answer, turned into a refusal naming the node and its input when a streaming
    node's budget cannot stream its model; else unchanged."""
    try:
        ok, error, outputs, node_errors = answer
    except (TypeError, ValueError):
        return answer
    if not ok or not isinstance(prompt, dict) or not any(_names_a_budget(n) for n in prompt.values()):
        return answer
    try:
        plan_workflow(prompt, None, Hardware.pcie(4), models_dir=HOST_MODEL_FILES, time_limit_s=LIMIT_S)
        return answer
    except BudgetRefused as refused:
        node = prompt.get(refused.node_id)
        class_type = node.get("class_type") if isinstance(node, dict) else None
        errors = dict(node_errors or {})
        errors[refused.node_id] = {
            "errors": [{
                "type": "value_not_valid", "message": "Headroom: this VRAM budget cannot stream the model",
                "details": str(refused), "extra_info": {"input_name": "vram_budget"},
            }],
            "dependent_outputs": list(outputs or []),
            "class_type": class_type,
        }  # fmt: skip
        failed = {"type": "prompt_outputs_failed_validation", "message": "Prompt outputs failed validation",
                  "details": str(refused), "extra_info": {}}  # fmt: skip
        return (False, failed, [], errors)
    except (ValueError, KeyError, TypeError, PlanTimeout, RecursionError, OverflowError):
        return answer  # what the plan cannot read, the preflight says; the host's answer stands
    except Exception:  # fail open: the host's own validation decides
        _log.warning(
            "Headroom: the budget check at validation failed; the host's answer stands", exc_info=True
        )
        return answer
