"""The one registry of every change Headroom makes to the host's code or state, each with its undo.

As accelerate keeps a module's ``_old_forward`` and diffusers' HookRegistry owns every hook, each
replacement of a host attribute (``replace``) or other write to host state (``record``, with the undo that
reverts it) is a ``Patch`` here. A patch says separately that it is *installed* and how often it *fired*
(its wrapper ran): a hook that is installed but that the host stopped calling reads "installed, never
fired", not "on". ``uninstall`` undoes patches in reverse order and puts back exactly what was there: the
original attribute, or no attribute at all where the patch added one over a class's.

Process-wide hooks that every prompt goes through are marked ``per_prompt``; when prompts ran (the event
source reports each prompt it sees) and such a hook never fired, that is logged once as a warning.

This module imports nothing of the host or of the pack: every other host module may use it.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...memory.process_state import PROCESS

_log = logging.getLogger("headroom")

POSTED_KEPT = 256  # writes to posted prompts kept undoable until their prompt starts
_MISSING = object()  # the target had no attribute of its own (it was the class's, or absent)


class PatchRefused(RuntimeError):
    """A second install of a patch name on the same target while the first is in force."""


class _Live:
    """What a shim calls: the wrapper while the patch is in force, else what it replaced."""

    def __init__(self, impl: Callable[..., Any], inner: Callable[..., Any]) -> None:
        self.impl, self.inner, self.on = impl, inner, True

    def current(self) -> Callable[..., Any]:
        return self.impl if self.on else self.inner


def _shim(live: _Live) -> Callable[..., Any]:
    """The function put on the host: looks ``live`` up on every call (a plain function, so it binds as
    a method the way the wrapper would, and a coroutine function where the wrapper is one)."""
    if inspect.iscoroutinefunction(live.impl):

        async def shim_async(*args: Any, **kwargs: Any) -> Any:
            return await live.current()(*args, **kwargs)

        shim: Callable[..., Any] = shim_async
    else:

        def shim_sync(*args: Any, **kwargs: Any) -> Any:
            return live.current()(*args, **kwargs)

        shim = shim_sync
    functools.update_wrapper(shim, live.impl)  # its name, doc and flags (``__headroom__``)
    shim.__wrapped__ = live.inner  # type: ignore[attr-defined]  # what it replaced, as a wrapper says
    return shim


@dataclass(eq=False)
class Patch:
    """One change to the host. ``fire`` is what its wrapper calls each time it runs."""

    name: str
    undo: Callable[[], bool | None]  # False (or raising): it could not be undone now
    target: Any = None  # what ``replace`` changed (for ``is_installed`` checks), else None
    attr: str = ""
    replacement: Any = None
    per_prompt: bool = False  # every prompt the executor runs goes through it
    installed: bool = True
    fired: int = 0
    installed_at: int = 0  # the registry's prompt count when it was installed
    prompt_id: str | None = None  # a write to one posted prompt: the host has it once that prompt starts
    warned: bool = field(default=False, repr=False)
    stuck: str = ""  # why the last undo failed: the patch passes straight through, retried at uninstall
    live: _Live | None = field(default=None, repr=False)  # the shim's switch, for a function put in

    def fire(self) -> None:
        self.fired += 1


class PatchRegistry:
    """The patches in force, in the order they were installed."""

    def __init__(self) -> None:
        self.patches: list[Patch] = []
        self.prompts = 0  # prompts the event source saw start
        self._last_prompt: str | None = None
        self._lock = threading.RLock()

    def replace(self, name: str, target: Any, attr: str, replacement: Any, per_prompt: bool = False) -> Patch:
        """Set ``target.attr = replacement``, remembering what ``target`` itself held (its own attribute,
        or none, so that a class's method shows through again on uninstall). A function goes in as a
        shim that can step out of a chain (see the module's doc); a wrapper that calls what it replaces
        should use ``wrap``, which can install it again over a stuck patch."""
        return self.wrap(name, target, attr, lambda inner: replacement, per_prompt, rearm=False)

    def wrap(
        self,
        name: str,
        target: Any,
        attr: str,
        make: Callable[[Any], Any],
        per_prompt: bool = False,
        rearm: bool = True,
    ) -> Patch:
        """``target.attr = make(inner)``, ``inner`` being what ``target.attr`` reads now. Over a stuck
        patch of ``name`` on ``target`` (someone else's wrapper still calls its shim) it re-arms that
        shim with ``make(what the shim replaced)`` instead: one wrap in the chain, not two."""
        with self._lock:
            for p in self.patches:
                if p.installed and p.name == name and p.target is target:
                    if not p.stuck:
                        raise PatchRefused(f"{name} is already installed on {target!r}")
                    if not rearm or p.live is None:
                        raise PatchRefused(f"{name} is stuck on {target!r} ({p.stuck}); not installed again")
                    p.live.impl, p.live.on, p.stuck = make(p.live.inner), True, ""
                    _log.info("Headroom: %s armed again in place (its shim was still in the chain)", name)
                    return p
            before = vars(target).get(attr, _MISSING) if hasattr(target, "__dict__") else _MISSING
            inner = getattr(target, attr, None)
            replacement = make(inner)
            live = _Live(replacement, inner) if inspect.isfunction(replacement) and callable(inner) else None
            value = replacement if live is None else _shim(live)

            def undo() -> bool:
                if (vars(target).get(attr, _MISSING) if hasattr(target, "__dict__") else None) is not value:
                    return False
                if before is _MISSING:
                    delattr(target, attr)
                else:
                    setattr(target, attr, before)
                return True

            setattr(target, attr, value)
            patch = Patch(name, undo, target, attr, value, per_prompt, installed_at=self.prompts, live=live)
            self.patches.append(patch)
            return patch

    def record(
        self, name: str, undo: Callable[[], None], per_prompt: bool = False, prompt_id: str | None = None
    ) -> Patch:
        """A change the caller made (a write to a host object), with its undo. With ``prompt_id``, a write
        to that posted prompt: forgotten once the prompt starts (the host has read it)."""
        with self._lock:
            if prompt_id is not None:  # posted prompts the host never started (refused): the oldest go
                posted = [p for p in self.patches if p.prompt_id is not None]
                for p in posted[: max(0, len(posted) - POSTED_KEPT + 1)]:
                    self.forget(p)
            patch = Patch(name, undo, per_prompt=per_prompt, installed_at=self.prompts, prompt_id=prompt_id)
            self.patches.append(patch)
            return patch

    def record_on(self, name: str, obj: Any, undo: Callable[[Any], bool | None]) -> Patch:
        """A change the caller made to the host object ``obj`` (a module's instance ``_apply``), held
        weakly: the registry must not keep the host's model alive. ``undo(obj)`` undoes it while ``obj``
        lives; once the host frees it, the patch is forgotten. One per name and object (``find_on``)."""
        ref = weakref.ref(obj)

        def run() -> bool | None:
            live = ref()
            return None if live is None else undo(live)

        with self._lock:
            if self.find_on(name, obj) is not None:
                raise PatchRefused(f"{name} is already recorded on {obj!r}")
            patch = Patch(name, run, ref, installed_at=self.prompts)
            self.patches.append(patch)
        weakref.finalize(obj, self.forget, patch)
        return patch

    def find_on(self, name: str, obj: Any) -> Patch | None:
        """The patch ``name`` that ``record_on`` made on ``obj``, still installed (stuck or not)."""
        for p in self.patches:
            if p.installed and p.name == name and isinstance(p.target, weakref.ref) and p.target() is obj:
                return p
        return None

    def insert(self, name: str, seq: list[Any], item: Any, index: int = 0) -> Patch:
        """``seq.insert(index, item)`` into a host list; the undo removes that item (by identity) if it is
        still there. An item the host has taken out since (it unloaded the model) leaves the registry at
        the next insert of the same name, so the patches stay as many as the items in the list."""
        with self._lock:
            for p in [p for p in self.patches if p.installed and p.name == name and p.target is seq]:
                if all(x is not p.replacement() for x in seq):
                    self.forget(p)
            seq.insert(index, item)
            ref = weakref.ref(item)  # the host decides how long its entry lives

            def undo() -> None:
                for i, x in enumerate(seq):
                    if x is ref():
                        del seq[i]
                        return

            patch = Patch(name, undo, seq, "", ref, installed_at=self.prompts)
            self.patches.append(patch)
            return patch

    def forget(self, patch: Patch) -> None:
        """Drop ``patch`` without undoing it: what it changed is gone (a clone freed, an entry the host
        took out) or is the host's own now (a posted prompt it started)."""
        with self._lock:
            patch.installed = False
            self.patches = [p for p in self.patches if p is not patch]

    def find(self, name: str, target: Any = None) -> Patch | None:
        """The patch ``name`` in force (on ``target``, when given); a stuck one is not."""
        for patch in reversed(self.patches):
            if (
                patch.installed
                and not patch.stuck
                and patch.name == name
                and (target is None or patch.target is target)
            ):
                return patch
        return None

    def already_on(self, name: str, target: Any, current: Any, marker: str = "__headroom__") -> bool:
        """Whether ``name`` is on ``target`` already: in force here, or (none held here, not even stuck)
        ``current`` carries the wrapper's ``marker``, the pack having been loaded twice under two names.
        A stuck patch is not on, whatever marker another's wrapper copied from it (``functools.wraps``)."""
        held = [p for p in self.patches if p.installed and p.name == name and p.target is target]
        if held:
            return not held[-1].stuck
        return bool(getattr(current, marker, False))

    def fire(self, name: str) -> None:
        """Count a run of the installed patch ``name`` (wrappers that do not hold their Patch call this)."""
        patch = self.find(name)
        if patch is not None:
            patch.fired += 1

    def uninstall(self, patch: Patch | None = None, prefix: str | None = None) -> int:
        """Undo one patch, or every patch whose name starts with ``prefix``, or (neither given) every
        patch, newest first; returns how many were undone. One that cannot be undone (another's wrapper
        is on top, or its undo raised) stays, stuck: its shim passes straight through, the warning says
        so, ``state`` counts it, and the next uninstall tries it again."""
        with self._lock:
            chosen = [
                p
                for p in reversed(self.patches)
                if p.installed
                and (patch is None or p is patch)
                and (prefix is None or p.name.startswith(prefix))
            ]
            undone = 0
            for p in chosen:
                try:
                    done = p.undo() is not False
                    why = "" if done else "replaced again by someone else"
                except Exception as exc:
                    done, why = False, f"its undo raised {exc!r}"
                if done:
                    p.installed, p.stuck = False, ""
                    undone += 1
                    continue
                if p.live is not None:
                    p.live.on = False
                if p.stuck != why:  # said once per reason, not at every retry
                    _log.warning(
                        "Headroom: could not undo %s (%s); %s, and it is tried again at the next uninstall",
                        p.name,
                        why,
                        "it passes straight through" if p.live is not None else "it stays as it is",
                    )
                p.stuck = why
            self.patches = [p for p in self.patches if p.installed]
            return undone

    def prompt_seen(self, prompt_id: Any) -> None:
        """A prompt started (called from every hook that sees one, so one silent hook cannot hide
        itself). When a prompt ran to the next, a per-prompt hook installed before it that never fired
        is a warning, once."""
        with self._lock:
            key = str(prompt_id)
            if key == self._last_prompt:
                return
            for p in [p for p in self.patches if p.prompt_id == key]:
                self.forget(p)
            self._last_prompt = key
            self.prompts += 1
            for p in self.patches:
                if (
                    p.installed
                    and not p.stuck
                    and p.per_prompt
                    and not p.fired
                    and not p.warned
                    and p.installed_at < self.prompts - 1
                ):
                    p.warned = True
                    _log.warning(
                        "Headroom: the hook %s is installed but never fired while %d prompts ran: this "
                        "host no longer calls through it, so what depends on it is not running",
                        p.name,
                        self.prompts - 1 - p.installed_at,
                    )

    def state(self) -> dict[str, dict[str, Any]]:
        """Per patch name: installed (how many in force), fired (total runs), stuck (how many could not
        be undone: in the host still, passing straight through), what /headroom/status shows."""
        out: dict[str, dict[str, Any]] = {}
        for p in self.patches:
            entry = out.setdefault(p.name, {"installed": 0, "fired": 0, "stuck": 0})
            entry["installed"] += p.installed and not p.stuck
            entry["stuck"] += bool(p.stuck)
            entry["fired"] += p.fired
        return out


REGISTRY = PROCESS.hold(  # the process's one registry
    "host.patches: patch registry",
    PatchRegistry(),
    "the undo of every change to the host; forgetting one would leave it in the host for good (tests undo "
    "theirs with uninstall)",
)
