"""The executor's boundaries as one event source: prompt start and end, node start and finish, the host's
prompt validation, and a node that ran out of memory.

Every patch of the host's ``execution`` module is installed here, by ``EventSource.install``, in this
order (each step feature-detected, failing open with a state string the status route shows):

1. node boundaries: on current hosts a progress handler registered through a wrapper of
   ``reset_progress_state``; on the 2024 host wrappers of ``recursive_execute`` and of
   ``get_output_data`` (``legacy_2024.hook_node_boundaries``);
2. the OOM retry: a second wrapper of ``get_output_data``, around whatever step 1 left there;
3. the validation mark: a wrapper of ``validate_prompt``;
4. the cache report: a wrapper of ``PromptExecutor.add_message`` that reads the host's own
   ``execution_cached`` message (which nodes it serves from its cache: the executor never visits a cached
   node that only feeds others, so no node boundary reports it).

Two steps replace ``execution.get_output_data``, and the order is what makes a retried node right on the
2024 host: the retry wraps the node-boundary wrapper, so the attempt that ran out of memory is reported
finished (failed) before subscribers are asked to recover, and the retry is a node start of its own. The
other way round, recovery would run inside the failed node's boundaries and the retry would be invisible.
Installing twice patches nothing twice: a patch in force is found in the registry (and a wrapper's marker
says so when the pack was loaded twice); installing over a stuck patch re-arms its shim in place.

Subscribers (the monitor, the residency controller) get every event in the order they were subscribed;
each call fails open: an exception is logged and the next subscriber still gets the event. The host has no
prompt-end hook common to both hosts, so a prompt is reported finished when the next one starts.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import sys
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any

from . import legacy_2024
from .budget_check import refuse_at_validation
from .patches import REGISTRY

_log = logging.getLogger("headroom")


class Subscriber:
    """What the source publishes; a subscriber overrides the events it needs (the rest do nothing)."""

    def prompt_started(self, prompt_id: str, prompt: dict[str, Any] | None) -> None:
        pass

    def prompt_finished(self, prompt_id: str) -> None:
        pass

    def node_started(self, prompt_id: str | None, node_id: str) -> None:
        pass

    def node_finished(self, prompt_id: str | None, node_id: str, ok: bool) -> None:
        pass

    def validation_started(self) -> None:
        pass

    def validation_finished(self, prompt: Any = None, valid: bool | None = None) -> None:
        """The host validated ``prompt`` (the object POSTed): ``valid`` False when it refused it, None
        when not known (the validation raised, or its answer had another shape)."""

    def nodes_cached(self, prompt_id: str, node_ids: list[str]) -> None:
        """The nodes of the prompt the host serves from its cache (after prompt_started)."""

    def out_of_memory(self) -> bool:
        """A node of the running prompt ran out of memory: True if it was made room for and may run once
        more (it is run again once at most)."""
        return False


HOOKS_ENV = "HEADROOM_HOOKS"


def hooks_enabled() -> bool:
    """False when the user turned Headroom's executor hooks off (``HEADROOM_HOOKS=0``)."""
    return os.environ.get(HOOKS_ENV) != "0"


class EventSource:
    """The process's one source of executor events (see the module docstring for the patch order)."""

    def __init__(self, subscribers: Iterable[Subscriber] = ()) -> None:
        self.subscribers = list(subscribers)
        self.current: str | None = None  # the prompt that started last
        self.hooks: dict[str, str] = {}  # patch -> "on", or why it is off
        self._early_cached: tuple[str, list[str]] | None = None  # reported before its prompt started

    def _publish(self, event: str, *args: Any) -> list[Any]:
        results = []
        for subscriber in list(self.subscribers):
            try:
                results.append(getattr(subscriber, event)(*args))
            except Exception:
                _log.exception(
                    "Headroom: %s failed in %s; the workflow is not affected",
                    type(subscriber).__name__,
                    event,
                )
        return results

    # -- what the host's patches call
    def prompt_started(self, prompt_id: Any, prompt: Any) -> None:
        previous, self.current = self.current, str(prompt_id)
        if previous is not None:
            self._publish("prompt_finished", previous)
        self._publish("prompt_started", self.current, prompt if isinstance(prompt, dict) else None)
        early, self._early_cached = self._early_cached, None
        if early is not None and early[0] == self.current:
            self._publish("nodes_cached", *early)

    def nodes_cached(self, prompt_id: Any, node_ids: Iterable[Any]) -> None:
        """The host's execution_cached report; the 2024 host sends it before the prompt's first node (which
        is when this source learns that the prompt started): held until then."""
        cached = (str(prompt_id), [str(n) for n in node_ids])
        if cached[0] == self.current:
            self._publish("nodes_cached", *cached)
        else:
            self._early_cached = cached

    def node_started(self, prompt_id: Any, node_id: Any) -> None:
        self._publish("node_started", None if prompt_id is None else str(prompt_id), str(node_id))

    def node_finished(self, prompt_id: Any, node_id: Any, ok: bool = True) -> None:
        self._publish("node_finished", None if prompt_id is None else str(prompt_id), str(node_id), ok)

    @contextlib.contextmanager
    def validation(self, prompt: Any = None) -> Iterator[list[Any]]:
        """Around the host's validation of ``prompt``: the caller appends the host's answer to the list."""
        answer: list[Any] = []
        self._publish("validation_started")
        try:
            yield answer
        finally:
            self._publish("validation_finished", prompt, _valid(answer[0]) if answer else None)

    def out_of_memory(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the host's out-of-memory error and a subscriber made room to run once more."""
        mm = sys.modules.get("comfy.model_management")
        if mm is None or not isinstance(exc, mm.OOM_EXCEPTION):
            return False
        return any(self._publish("out_of_memory"))

    # -- installing the patches, in the stated order
    def uninstall(self) -> int:
        """Undo every patch ``install`` made (the host's ``execution`` is as before); returns how many."""
        self.hooks.clear()
        return REGISTRY.uninstall(prefix="execution.")

    def install(self, execution: ModuleType) -> dict[str, str]:
        """Patch ``execution`` (once): node boundaries, then the OOM retry, then the validation mark."""
        if self.hooks:
            return dict(self.hooks)
        try:
            state = _hook_progress(self, execution)
            if state != "on":
                state = legacy_2024.hook_node_boundaries(self, execution) or state
        except Exception as exc:
            state = f"off: {exc!r}"
        self.hooks["nodes"] = state
        steps = (("oom_retry", _hook_oom_retry), ("validation", _hook_validation), ("cached", _hook_cached))
        for name, hook in steps:
            try:
                self.hooks[name] = hook(self, execution)
            except Exception as exc:
                self.hooks[name] = f"off: {exc!r}"
        return dict(self.hooks)


def _hook_progress(source: EventSource, execution: ModuleType) -> str:
    """Current hosts: a ProgressHandler per prompt. The registry is recreated every prompt, so the wrapper
    around execution.reset_progress_state (imported there by name) registers ours each time."""
    progress = sys.modules.get("comfy_execution.progress")
    current = getattr(execution, "reset_progress_state", None)
    if progress is None or current is None or not hasattr(progress, "add_progress_handler"):
        return "off: no comfy_execution.progress registry on this host"
    if REGISTRY.already_on("execution.reset_progress_state", execution, current):
        return "on"

    handler_base: Any = progress.ProgressHandler  # the host's class, read from the running host

    class HeadroomProgressHandler(handler_base):  # type: ignore[misc]  # the host's class, read at run time
        def __init__(self) -> None:
            super().__init__("headroom")

        def start_handler(self, node_id: str, state: Any, prompt_id: str) -> None:
            source.node_started(prompt_id, node_id)

        def finish_handler(self, node_id: str, state: Any, prompt_id: str) -> None:
            source.node_finished(prompt_id, node_id)

    def make(original: Any) -> Any:
        @functools.wraps(original)
        def reset_progress_state(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            patch.fire()
            try:
                prompt_id = args[0] if args else kwargs["prompt_id"]
                dynprompt = args[1] if len(args) > 1 else kwargs.get("dynprompt")
                REGISTRY.prompt_seen(prompt_id)
                source.prompt_started(prompt_id, getattr(dynprompt, "original_prompt", None))
                progress.add_progress_handler(HeadroomProgressHandler())
            except Exception:
                _log.exception("Headroom: could not add the progress handler; the workflow is not affected")
            return result

        reset_progress_state.__headroom__ = True  # type: ignore[attr-defined]
        return reset_progress_state

    patch = REGISTRY.wrap(
        "execution.reset_progress_state", execution, "reset_progress_state", make, per_prompt=True
    )
    return "on"


def _hook_oom_retry(source: EventSource, execution: ModuleType) -> str:
    """A node that runs out of memory is run once more when a subscriber (the residency controller, in a
    prompt it manages) freed the device and put back what the node needs: the prompt finishes when the
    budget allows. (Without it the host unloads everything and fails the prompt.)"""
    name = "execution.get_output_data[oom_retry]"
    current = getattr(execution, "get_output_data", None)
    if current is None:
        return "off: no get_output_data on this host"
    if REGISTRY.already_on(name, execution, current, marker="__headroom_oom__"):
        return "on"

    def make(run: Any) -> Any:
        if inspect.iscoroutinefunction(run):

            @functools.wraps(run)
            async def get_output_data(*args: Any, **kwargs: Any) -> Any:
                patch.fire()
                try:
                    return await run(*args, **kwargs)
                except Exception as exc:
                    if not source.out_of_memory(exc):
                        raise
                return await run(*args, **kwargs)  # outside the except: the failed try's tensors are gone
        else:

            @functools.wraps(run)
            def get_output_data(*args: Any, **kwargs: Any) -> Any:
                patch.fire()
                try:
                    return run(*args, **kwargs)
                except Exception as exc:
                    if not source.out_of_memory(exc):
                        raise
                return run(*args, **kwargs)

        get_output_data.__headroom_oom__ = True  # type: ignore[attr-defined]
        return get_output_data

    patch = REGISTRY.wrap(name, execution, "get_output_data", make)
    return "on"


def _hook_validation(source: EventSource, execution: ModuleType) -> str:
    """Mark the host's prompt validation (on the event loop, seconds for a big prompt) so that a preflight
    waits for it instead of sharing the GIL with it: routes answer after the host's validation alone."""
    current = getattr(execution, "validate_prompt", None)
    if current is None:
        return "off: no execution.validate_prompt on this host"
    if REGISTRY.already_on("execution.validate_prompt", execution, current):
        return "on"

    def make(original: Any) -> Any:
        if inspect.iscoroutinefunction(original):

            @functools.wraps(original)
            async def validate_prompt(*args: Any, **kwargs: Any) -> Any:
                patch.fire()
                prompt = _prompt_of(args, kwargs)
                with source.validation(prompt) as answer:
                    answer.append(refuse_at_validation(prompt, await original(*args, **kwargs)))
                    return answer[0]
        else:

            @functools.wraps(original)
            def validate_prompt(*args: Any, **kwargs: Any) -> Any:
                patch.fire()
                prompt = _prompt_of(args, kwargs)
                with source.validation(prompt) as answer:
                    answer.append(refuse_at_validation(prompt, original(*args, **kwargs)))
                    return answer[0]

        validate_prompt.__headroom__ = True  # type: ignore[attr-defined]
        return validate_prompt

    patch = REGISTRY.wrap("execution.validate_prompt", execution, "validate_prompt", make)
    return "on"


def _prompt_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The prompt validate_prompt was given: (prompt) on the 2024 host, (prompt_id, prompt, targets) now."""
    if isinstance(kwargs.get("prompt"), dict):
        return kwargs["prompt"]
    return next((a for a in args if isinstance(a, dict)), None)


def _valid(answer: Any) -> bool | None:
    """validate_prompt's verdict: its answer is (valid, error, outputs, node_errors) on every host."""
    if isinstance(answer, (tuple, list)) and answer and isinstance(answer[0], bool):
        return answer[0]
    return None


def _hook_cached(source: EventSource, execution: ModuleType) -> str:
    """Read the host's execution_cached message as the executor sends it (both hosts send it through
    PromptExecutor.add_message, once per prompt, before its first node runs)."""
    name = "execution.PromptExecutor.add_message"
    executor = getattr(execution, "PromptExecutor", None)
    current = getattr(executor, "add_message", None)
    if current is None:
        return "off: no PromptExecutor.add_message on this host"
    if REGISTRY.already_on(name, executor, current):
        return "on"

    def make(original: Any) -> Any:
        @functools.wraps(original)
        def add_message(*args: Any, **kwargs: Any) -> Any:
            try:
                event = args[1] if len(args) > 1 else kwargs.get("event")
                data = args[2] if len(args) > 2 else kwargs.get("data")
                if isinstance(data, dict) and data.get("prompt_id") is not None:
                    patch.fire()
                    REGISTRY.prompt_seen(data["prompt_id"])
                    if event == "execution_cached":
                        source.nodes_cached(data["prompt_id"], list(data.get("nodes") or ()))
            except Exception:
                _log.exception("Headroom: reading the cached nodes failed; the workflow is not affected")
            return original(*args, **kwargs)

        add_message.__headroom__ = True  # type: ignore[attr-defined]
        return add_message

    patch = REGISTRY.wrap(name, executor, "add_message", make, per_prompt=True)
    return "on"
