"""The monitor's server side: read-only routes under /headroom/ (parameters validated, unknown ids ->
404, nothing taken as a path), one POST (the frontend's RAM budget setting) and the preflight of every
prompt POSTed to /prompt. Nothing here runs without a PromptServer (in-process hosts have none)."""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ...memory.names import ROUTES
from ...memory.planning.gpus import find_gpu, gpu_names
from ...memory.residency.mapped import live_mappings
from ...memory.residency.ram_budget import RAM, RAM_BUDGET_ENV
from ...memory.units import parse_size_setting
from ...version import __version__
from . import legacy_2024
from .lookups import host_version
from .monitor import DEMAND_S, Monitor, json_safe
from .patches import REGISTRY
from .refusals import unreadable_value
from .state import configure_ram_budget, monitor, ram_budget, residency

_log = logging.getLogger("headroom")
_PROMPT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")  # uuids and the ids tests and scripts use


def install_server(m: Monitor, server: Any) -> None:
    """The routes (once per server) and the preflight handler, where the host's server has the hook."""
    web = importlib.import_module("aiohttp.web")
    if not getattr(server, "_headroom_routes", False):
        before = list(server.routes)
        _add_routes(web, server.routes)
        added = [r for r in server.routes if all(r is not b for b in before)]
        REGISTRY.record("server.PromptServer.routes", functools.partial(_remove_routes, server.routes, added))
        REGISTRY.replace("server.PromptServer._headroom_routes", server, "_headroom_routes", True)
    if hasattr(server, "add_on_prompt_handler"):
        handler = functools.partial(_on_prompt, m)
        server.add_on_prompt_handler(handler)
        REGISTRY.record(
            "server.PromptServer.on_prompt_handlers", functools.partial(_remove_handler, server, handler)
        )
    else:
        m.hooks["preflight"] = "off: this host's PromptServer has no add_on_prompt_handler"
        _log.warning("Headroom: preflight is off: no add_on_prompt_handler on this host")
    m.server = server


def _remove_routes(routes: Any, added: list[Any]) -> None:
    """Take our route definitions out of the host's table (an app built from it already keeps them)."""
    items = getattr(routes, "_items", None)  # aiohttp's RouteTableDef is a read-only Sequence over this
    if isinstance(items, list):
        items[:] = [r for r in items if all(r is not a for a in added)]


def _remove_handler(server: Any, handler: Any) -> None:
    handlers = getattr(server, "on_prompt_handlers", None)
    if isinstance(handlers, list) and handler in handlers:
        handlers.remove(handler)


def _safe(what: str, fn: Callable[..., object], *args: object) -> None:
    try:
        fn(*args)
    except Exception:
        _log.exception("Headroom: telemetry failed in %s; the workflow is not affected", what)


def _on_prompt(m: Monitor, json_data: Any) -> Any:
    """POST /prompt, before validation, on the event loop: plan in the background, never block or alter the
    prompt. On hosts that honour a given prompt_id one is assigned here, so /headroom/plan/{id} works while
    the prompt is still queued. The work is bounded (preflight_queue.py): a prompt the host refuses is not
    planned, the same prompt waits once, and past the queue's cap a prompt is not planned, which
    /headroom/plan/{id} says."""
    REGISTRY.fire("server.PromptServer.on_prompt_handlers")
    try:
        prompt = json_data.get("prompt") if isinstance(json_data, dict) else None
        if not isinstance(prompt, dict):
            return json_data
        if not legacy_2024.makes_own_prompt_id() and "prompt_id" not in json_data:
            _assign_prompt_id(json_data)
        prompt_id = json_data.get("prompt_id")
        prompt_id = str(prompt_id) if prompt_id is not None else None
        key = m.plans.key(prompt, m.budget())
        if prompt_id is not None:
            m.queued_prompt(prompt_id, key, _workflow_id(json_data))
        m.posted(prompt, prompt_id)
        job = functools.partial(_submit, m, key, prompt, prompt_id, json_data.get("client_id"))
        try:  # after the host's handler: its validation runs on this loop and would share the GIL
            asyncio.get_running_loop().call_soon(job)
        except RuntimeError:  # called outside the event loop
            job()
    except Exception:
        _log.exception("Headroom: preflight failed; the prompt is queued as usual")
    return json_data


def _submit(m: Monitor, key: str, prompt: dict[str, Any], prompt_id: str | None, client_id: Any) -> None:
    """Queue a posted prompt's preflight, unless the host refused it already; say so when the queue is
    full."""
    if m.was_refused(prompt):
        return
    size = _json_size(prompt)
    job = functools.partial(_safe, "preflight", _preflight, m, prompt, prompt_id, client_id)
    if size is None or m.pool.submit_preflight(key, prompt, size, prompt_id, job) == "full":
        state = m.pool.state()
        m.not_planned(
            prompt_id,
            f"not planned: the preflight queue is full ({state['waiting']} prompts waiting, at most "
            f"{state['max_waiting']} and {state['max_bytes'] // 2**20} MiB); the prompt runs as usual",
        )


def _preflight(m: Monitor, prompt: dict[str, Any], prompt_id: str | None, client_id: Any) -> None:
    """On the planning thread: an input the planner cannot read is said (not planned), else the plan."""
    problem = unreadable_value(prompt)  # a walk of the whole prompt: off the event loop
    if problem:
        m.not_planned(prompt_id, f"not planned: {problem}")
        return
    m.preflight(prompt, prompt_id, client_id)


def _fit(m: Monitor, prompt: dict[str, Any], gpu: Any = None) -> Any:
    """On the planning thread: why the prompt cannot be planned (a str), or its plan and verdict (on the
    card chosen in the sidebar, ``gpu``, when one was)."""
    return unreadable_value(prompt) or (m.plan_for(prompt) if gpu is None else m.plan_for(prompt, gpu))


def _json_size(value: Any) -> int | None:
    """The prompt's size as JSON (what the queue's byte cap counts); None for one JSON cannot write."""
    try:
        return len(json.dumps(value, default=str))
    except (ValueError, TypeError, RecursionError):
        return None


def _assign_prompt_id(json_data: dict[str, Any]) -> None:
    """Write a prompt_id into the posted prompt (the host takes it as the prompt's id), as a patch whose
    undo takes it out again; the registry forgets it once that prompt starts."""
    prompt_id = str(uuid.uuid4())
    json_data["prompt_id"] = prompt_id

    def undo() -> None:
        if json_data.get("prompt_id") == prompt_id:
            del json_data["prompt_id"]

    REGISTRY.record("server.posted prompt_id", undo, prompt_id=prompt_id)


def _workflow_id(json_data: dict[str, Any]) -> str | None:
    """The frontend's id of the workflow a prompt came from (the graph's id in extra_pnginfo), if any."""
    try:
        workflow_id = json_data["extra_data"]["extra_pnginfo"]["workflow"]["id"]
    except (KeyError, TypeError):
        return None
    return workflow_id if isinstance(workflow_id, str) and 0 < len(workflow_id) <= 128 else None


def _chosen_gpu(body: dict[str, Any]) -> tuple[Any, str | None]:
    """The card a /headroom/fit body names in "gpu" (the sidebar's setting), or None when it names none;
    an unknown name is refused naming the cards the table knows."""
    name = body.get("gpu")
    if name is None or name == "":
        return None, None
    gpu = find_gpu(name) if isinstance(name, str) and len(name) <= 100 else None
    if gpu is None:
        shown = repr(name)[:60]
        return None, f"unknown card {shown}: name one of {', '.join(gpu_names())}"
    return gpu, None


def _bad(web: Any, message: str) -> Any:
    return web.json_response({"error": message}, status=400)


async def _json_body(request: Any) -> tuple[Any, str]:
    """The request's JSON body and "", or None and why it cannot be read ("" for no JSON at all): a body
    nested deeper than the parser recurses (RecursionError, at about 1,000 levels), an integer of more
    digits than Python converts; each a 400 naming it, never a 500. (The parser is C: no Python loop over
    a body of up to the host's upload limit runs on the event loop.)"""
    try:
        text = await request.text()
    except (ValueError, UnicodeDecodeError):
        return None, "the body is not UTF-8 text"
    try:
        return json.loads(text), ""
    except RecursionError:
        return None, "the JSON body is nested too deeply to read"
    except ValueError as exc:
        if "digits" in str(exc):  # int(): "Exceeds the limit (4300 digits) for integer string conversion"
            return None, f"a number in the JSON body has too many digits ({str(exc)[:120]})"
        return None, ""


def _prompt_id(web: Any, request: Any) -> tuple[str, Any]:
    """The request's prompt id and None, or "" and the response refusing it."""
    prompt_id = str(request.match_info.get("prompt_id", ""))
    if not _PROMPT_ID.match(prompt_id):
        return "", _bad(web, "prompt_id must be 1-128 letters, digits, '_', '-', '.' or ':'")
    return prompt_id, None


def _ram_budget_body() -> dict[str, Any]:
    """The budget in force, the setting and the environment variable (which wins over the setting)."""
    budget = ram_budget()
    env = RAM.env.get(RAM_BUDGET_ENV) or None
    body: dict[str, Any] = {"budget": budget.as_dict(), "setting": RAM.setting, "env": env, "note": ""}
    if env is not None and budget.source == RAM_BUDGET_ENV:
        body["note"] = f"{RAM_BUDGET_ENV}={env} is set on the server: it wins over this setting"
    elif env is not None:
        try:
            parse_size_setting(env, RAM_BUDGET_ENV)
            why = f"{RAM_BUDGET_ENV}={env!r} is not used"
        except ValueError as exc:
            why = str(exc)
        body["note"] = f"{why}; ignored"
    return body


def _ram_budget_value(body: Any) -> tuple[str | None, str]:
    """The setting's value as ``state.configure_ram_budget`` takes it ("auto" or a size), or an error."""
    value = body.get("value") if isinstance(body, dict) else None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or len(str(value)) > 32:
        return None, 'send {"value": "auto"} or a size such as {"value": "24GB"} (a bare number is GiB)'
    text = str(value).strip()
    if text.lower() in ("", "auto"):
        return "auto", ""
    try:
        parse_size_setting(text, "RAM budget")  # the range HEADROOM_RAM_BUDGET takes too
    except ValueError as exc:
        return None, str(exc)
    return text, ""


_Handler = Callable[[Any], Awaitable[Any]]


class _RouteTable(Protocol):
    """aiohttp's RouteTableDef as the routes use it (the host's server holds one)."""

    def get(self, path: str) -> Callable[[_Handler], _Handler]: ...

    def post(self, path: str) -> Callable[[_Handler], _Handler]: ...


def _add_routes(web: Any, routes: _RouteTable) -> None:
    """Every /headroom/ route (memory.names.ROUTES), each answering as docs/hostile-input.md requires."""
    _add_state_routes(web, routes)
    _add_plan_routes(web, routes)
    _add_history_routes(web, routes)


def _add_state_routes(web: Any, routes: _RouteTable) -> None:
    """What the monitor and the residency controller hold now: status, runs, residency, RAM."""

    @routes.get(ROUTES["status"])
    async def headroom_status(request: Any) -> Any:
        query = request.query
        try:
            since = float(query["since"]) if "since" in query else None
            limit = int(query.get("limit", "300"))
        except ValueError:
            return _bad(web, "since must be a number (seconds since the epoch) and limit an integer")
        if not 1 <= limit <= 3600 or (since is not None and since != since):
            return _bad(web, "limit must be 1-3600 and since a number")
        m = monitor()
        m.demand_until = time.monotonic() + DEMAND_S  # someone is looking: sample for a while
        m.sampler.ensure_running()
        samples = m.sampler.history(since=since, limit=limit)
        latest = m.sampler.latest or m.sampler.tick(notify=False)
        current = m.telemetry.current
        return web.json_response(
            {
                "version": __version__,
                "host": host_version(),
                "rate_hz": 1 / m.sampler.period_s if m.sampler.period_s else 0,
                "sampling": m.sampler.running,
                "sources": m.probe.sources(),
                "hooks": dict(m.hooks),
                "patches": REGISTRY.state(),  # per patch of the host: installed (count) and fired (runs)
                "assume_vram": m.assume_vram,
                "latest": latest.as_dict(),
                "samples": [s.as_dict() for s in samples],
                "prompts": m.telemetry.prompt_ids(),
                "current": current.prompt_id if current else None,
                "mappings": dict(zip(("files", "bytes"), live_mappings(), strict=True)),  # address space
            }
        )

    @routes.get(ROUTES["runs"])
    async def headroom_runs(request: Any) -> Any:
        """The kept runs, oldest first, with their workflow and per-node badges: a reloaded page shows
        the last run's state again."""
        return web.json_response({"runs": monitor().telemetry.recent()})

    @routes.get(ROUTES["residency"])
    async def headroom_residency(request: Any) -> Any:
        """The residency controller's log of one prompt: planned and applied moves, re-plans, the ledger."""
        prompt_id, error = _prompt_id(web, request)
        if error is not None:
            return error
        # in a worker thread: the controller's lock is held through a load at a node boundary
        summary = await asyncio.get_running_loop().run_in_executor(
            None, residency().controller.summary, prompt_id
        )
        if summary is None:
            return web.json_response({"error": f"unknown prompt {prompt_id}: no residency log"}, status=404)
        return web.json_response(summary)

    @routes.get(ROUTES["ram"])
    async def headroom_ram(request: Any) -> Any:
        """The RAM guard's per-node ledger of one prompt: predicted against actual RssAnon and pinned, the
        budget, what the guard moved, and the release after the prompt."""
        prompt_id, error = _prompt_id(web, request)
        if error is not None:
            return error
        # in a worker thread: the guard's lock is held while it maps a component to its file
        summary = await asyncio.get_running_loop().run_in_executor(
            None, residency().ram_guard.summary, prompt_id
        )
        if summary is None and monitor().telemetry.run(prompt_id) is not None:
            # a run the guard did not measure (no plan, or nothing left to plan): an answer, not a 404,
            # which the browser would print in red for every such run
            note = "the RAM guard did not measure this run (it measures planned prompts)"
            return web.json_response({"prompt_id": prompt_id, "measured": False, "nodes": [], "note": note})
        if summary is None:
            return web.json_response({"error": f"unknown prompt {prompt_id}: no RAM ledger"}, status=404)
        return web.json_response(summary)

    @routes.get(ROUTES["ram_budget"])
    async def headroom_ram_budget(request: Any) -> Any:
        return web.json_response(_ram_budget_body())

    @routes.post(ROUTES["ram_budget"])
    async def headroom_set_ram_budget(request: Any) -> Any:
        """The frontend's setting "Headroom.RamBudget": "auto" (the machine's default) or a size."""
        body, unreadable = await _json_body(request)
        value, error = _ram_budget_value(body)
        if value is None:
            return _bad(web, unreadable or error)
        configure_ram_budget(value)
        return web.json_response(_ram_budget_body())


def _add_plan_routes(web: Any, routes: _RouteTable) -> None:
    """The preflight of a posted workflow (fit) and the plan of one."""

    @routes.post(ROUTES["fit"])
    async def headroom_fit(request: Any) -> Any:
        """ "Will it fit?": plan an API prompt (the open workflow's) on the server's card without queueing
        it; the verdict both ways, the card it was checked on, the plan's VRAM peak and time."""
        body, unreadable = await _json_body(request)
        prompt = body.get("prompt") if isinstance(body, dict) else None
        if not isinstance(prompt, dict) or not prompt:
            usage = 'send {"prompt": {...}}: the API-format prompt of the workflow to check'
            return _bad(web, unreadable or usage)
        gpu, error = _chosen_gpu(body)
        if error is not None:
            return _bad(web, error)
        m = monitor()
        future = m.pool.submit_urgent(_fit, m, prompt, gpu)  # before every waiting preflight
        if future is None:
            return web.json_response(
                {"error": "busy: other fit checks are waiting; try again in a moment"}, status=429
            )
        try:
            result = await asyncio.wrap_future(future)
        except Exception as exc:  # the planner's own failure: said, never a 500
            _log.exception("Headroom: the fit check failed")
            return _bad(web, f"this prompt could not be planned ({type(exc).__name__}: {str(exc)[:200]})")
        if isinstance(result, str):
            return _bad(web, result)  # an input it cannot read, named
        planned, verdict = result
        plan = planned.plan if planned is not None else {}
        # what would make it fit, each change planned again (only when it does not: a dozen plans)
        remedies: list[Any] = []
        if verdict.fits is False:
            found = m.pool.submit_urgent(m.remedies_for, prompt, gpu)  # None: other checks are waiting
            remedies = await asyncio.wrap_future(found) if found is not None else []
        return web.json_response(
            json_safe(
                {
                    "card": m.card_name() if gpu is None else verdict.card,
                    "verdict": verdict.as_dict(),
                    "vram_peak": plan.get("vram_peak"),
                    "wall_s": plan.get("wall_s"),
                    "remedies": [r.as_dict() for r in remedies],
                    "time": plan.get("time"),  # the card and what the time includes, where the plan says
                    "cards": gpu_names(),  # what the sidebar offers to choose from (M6)
                }
            )
        )

    @routes.get(ROUTES["plan"])
    async def headroom_plan(request: Any) -> Any:
        prompt_id, error = _prompt_id(web, request)
        if error is not None:
            return error
        m = monitor()
        run = m.telemetry.run(prompt_id)
        if run is not None:
            planned, note = run.planned, run.plan_note
        else:
            with m.lock:
                key, why = m.queued.get(prompt_id), m.unplanned.get(prompt_id)
            if key is None and why is not None:
                return web.json_response({"prompt_id": prompt_id, "state": "not planned", "note": why})
            if key is None:
                return web.json_response({"error": f"unknown prompt {prompt_id}"}, status=404)
            cached = m.plans.peek(key)
            if cached is None:
                return web.json_response({"prompt_id": prompt_id, "state": "planning"}, status=202)
            planned, note = cached[0], cached[1].message
        body: dict[str, Any] = {"prompt_id": prompt_id, "state": "planned" if planned else "not planned"}
        body["note"] = note
        if planned is not None:
            body["preflight"] = planned.preflight
            body["plan"] = planned.plan
        return web.json_response(body)


def _add_history_routes(web: Any, routes: _RouteTable) -> None:
    """The memory history (its setting and its file) and the report of a run."""

    @routes.get(ROUTES["memory_history"])
    async def headroom_memory_history(request: Any) -> Any:
        return web.json_response(monitor().history.status())

    @routes.post(ROUTES["memory_history"])
    async def headroom_set_memory_history(request: Any) -> Any:
        """Arm the CUDA allocator's history for the next prompt ({"record": true}), disarm it, or end a
        recording now ({"stop": true}); 409 where this machine cannot record (no CUDA)."""
        body, unreadable = await _json_body(request)
        if not isinstance(body, dict) or not isinstance(body.get("record", body.get("stop")), bool):
            return _bad(web, unreadable or 'send {"record": true|false} or {"stop": true}')
        history = monitor().history
        if body.get("stop"):
            await asyncio.get_running_loop().run_in_executor(None, history.stop)
        elif "record" in body:
            why = history.arm(body["record"])
            if why:
                return web.json_response({**history.status(), "error": why}, status=409)
        return web.json_response(history.status())

    @routes.get(ROUTES["memory_history_file"])
    async def headroom_memory_history_file(request: Any) -> Any:
        prompt_id, error = _prompt_id(web, request)
        if error is not None:
            return error
        path = monitor().history.files.get(prompt_id)
        if path is None or not path.is_file():
            return web.json_response({"error": f"no memory history for prompt {prompt_id}"}, status=404)
        disposition = f'attachment; filename="{path.name}"'  # snapshot_name keeps [A-Za-z0-9_.-] only
        return web.FileResponse(path, headers={"Content-Disposition": disposition})

    @routes.get(ROUTES["report"])
    async def headroom_report(request: Any) -> Any:
        prompt_id, error = _prompt_id(web, request)
        if error is not None:
            return error
        fmt = request.query.get("format", "json")
        if fmt not in ("json", "csv"):
            return _bad(web, "format must be json or csv")
        report = monitor().telemetry.report(prompt_id, fmt)
        if report is None:
            return web.json_response({"error": f"unknown prompt {prompt_id}"}, status=404)
        if fmt == "csv":
            disposition = f'attachment; filename="headroom-{prompt_id}.csv"'  # the id matched _PROMPT_ID
            return web.Response(
                text=report, content_type="text/csv", headers={"Content-Disposition": disposition}
            )
        return web.json_response(report)
