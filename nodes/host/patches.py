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

import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_log = logging.getLogger("headroom")

POSTED_KEPT = 256  # writes to posted prompts kept undoable until their prompt starts
_MISSING = object()  # the target had no attribute of its own (it was the class's, or absent)


@dataclass(eq=False)
class Patch:
    """One change to the host. ``fire`` is what its wrapper calls each time it runs."""

    name: str
    undo: Callable[[], None]
    target: Any = None  # what ``replace`` changed (for ``is_installed`` checks), else None
    attr: str = ""
    replacement: Any = None
    per_prompt: bool = False  # every prompt the executor runs goes through it
    installed: bool = True
    fired: int = 0
    installed_at: int = 0  # the registry's prompt count when it was installed
    prompt_id: str | None = None  # a write to one posted prompt: the host has it once that prompt starts
    warned: bool = field(default=False, repr=False)

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
        or none, so that a class's method shows through again on uninstall)."""
        with self._lock:
            before = vars(target).get(attr, _MISSING) if hasattr(target, "__dict__") else _MISSING

            def undo() -> None:
                if (
                    vars(target).get(attr, _MISSING) if hasattr(target, "__dict__") else None
                ) is not replacement:
                    _log.warning("Headroom: %s was replaced again by someone else; left as it is", name)
                    return
                if before is _MISSING:
                    delattr(target, attr)
                else:
                    setattr(target, attr, before)

            setattr(target, attr, replacement)
            patch = Patch(name, undo, target, attr, replacement, per_prompt, installed_at=self.prompts)
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
        """The installed patch ``name`` (on ``target``, when given)."""
        for patch in reversed(self.patches):
            if patch.installed and patch.name == name and (target is None or patch.target is target):
                return patch
        return None

    def fire(self, name: str) -> None:
        """Count a run of the installed patch ``name`` (wrappers that do not hold their Patch call this)."""
        patch = self.find(name)
        if patch is not None:
            patch.fired += 1

    def uninstall(self, patch: Patch | None = None, prefix: str | None = None) -> int:
        """Undo one patch, or every patch whose name starts with ``prefix``, or (neither given) every
        patch, newest first; returns how many were undone. An undo that fails is logged and skipped."""
        with self._lock:
            chosen = [
                p
                for p in reversed(self.patches)
                if p.installed
                and (patch is None or p is patch)
                and (prefix is None or p.name.startswith(prefix))
            ]
            for p in chosen:
                try:
                    p.undo()
                except Exception:
                    _log.exception("Headroom: could not undo %s", p.name)
                p.installed = False
            self.patches = [p for p in self.patches if p.installed]
            return len(chosen)

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
        """Per patch name: installed (how many), fired (total runs), what /headroom/status shows."""
        out: dict[str, dict[str, Any]] = {}
        for p in self.patches:
            entry = out.setdefault(p.name, {"installed": 0, "fired": 0})
            entry["installed"] += p.installed
            entry["fired"] += p.fired
        return out


REGISTRY = PatchRegistry()  # the process's one registry
