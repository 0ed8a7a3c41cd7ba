"""The monitor's routes and websocket events on the host's own PromptServer, through aiohttp's test client.

The server is the host's own (``headroom_testing.served``). Prompts run through the harness's executor while
the monitor talks to this server, as it does in ``main.py``.
"""

from __future__ import annotations

import asyncio
import copy
import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from headroom_testing.prompts import hostile_prompt
from headroom_testing.served import WAIT_S, Served, receive

pytestmark = pytest.mark.host
ROOT = Path(__file__).resolve().parents[2]
FLUX = json.loads((ROOT / "example_workflows" / "api" / "Flux Dev text to image.json").read_text())
# The 2024 host has no Flux nodes and a preflight does not plan what the host cannot run: there an SDXL
# checkpoint is the workflow no 1 GB card holds.
SDXL = json.loads((ROOT / "example_workflows" / "api" / "SDXL on an 8 GB card.json").read_text())


def too_big(served: Served) -> tuple[dict, tuple[str, str] | None]:
    """A workflow this host can run that no 1 GB card fits, and the node the preflight should name."""
    if served.host.legacy:
        return copy.deepcopy(SDXL), None
    return copy.deepcopy(FLUX), ("6", "CLIPTextEncode")


PROMPT = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 16, "height": 16, "batch_size": 1, "color": 0}},
    "2": {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": ["1", 0]}},
}


def test_status_reports_sources_hooks_and_a_sample(served: Served) -> None:
    status = served.get_json("/headroom/status")
    assert status["hooks"]["nodes"] == "on" and status["hooks"]["server"] == "on"
    assert status["sources"]["psutil"] is True and status["sources"]["cuda"] is False  # CPU machine
    assert status["latest"]["rss"] > 0 and "device_used" not in status["latest"]  # absent, not an error
    assert status["host"] == served.host.version
    if not served.host.legacy:  # current hosts mirror every route under /api, which the frontend calls
        assert served.get_json("/api/headroom/status")["version"] == status["version"]


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=3601", "limit=ten", "since=yesterday", "since=nan", "since=1&limit=-5"]
)
def test_status_rejects_bad_parameters(served: Served, query: str) -> None:
    assert "error" in served.get_json(f"/headroom/status?{query}", status=400)


def test_status_filters_samples_by_time(served: Served) -> None:
    sampler = served.state.monitor().sampler
    first, second = sampler.tick(), sampler.tick()
    samples = served.get_json(f"/headroom/status?since={first.t}&limit=5")["samples"]
    assert samples and all(s["t"] > first.t for s in samples) and samples[-1]["t"] >= second.t


@pytest.mark.parametrize("route", ["report", "plan", "residency", "ram"])
def test_unknown_and_malformed_prompt_ids(served: Served, route: str) -> None:
    assert "unknown prompt" in served.get_json(f"/headroom/{route}/no-such-prompt", status=404)["error"]
    for bad in ("bad!id", "-leading-dash", "x" * 129):
        code, _, _ = served.get(f"/headroom/{route}/{bad}")
        assert code == 400, bad
    for path_like in ("%2E%2E", "..%2F..%2Fetc%2Fpasswd"):  # never a path: refused, or no route at all
        code, _, _ = served.get(f"/headroom/{route}/{path_like}")
        assert code in (400, 404), path_like


def test_routes_are_read_only(served: Served) -> None:
    async def post() -> int:
        return (await served.client.post("/headroom/status", json={})).status

    assert served.run(post()) == 405

    async def post_ledger() -> int:
        return (await served.client.post("/headroom/ram/some-prompt", json={})).status

    assert served.run(post_ledger()) == 405  # the one POST is the RAM budget setting


def test_report_and_plan_of_a_run(served: Served) -> None:
    served.state.monitor().configure(assume_vram=8 * 2**30)
    try:
        result = served.host.run(copy.deepcopy(PROMPT))
    finally:
        served.state.monitor().configure(assume_vram=None)
    pid = result.prompt_id
    report = served.get_json(f"/headroom/report/{pid}")
    assert report["preflight"]["time"]["card_source"] == "assumed"  # what the timeline's header shows
    assert [row["node"] for row in report["nodes"]] == ["1", "2"]
    assert all(row["status"] == "done" for row in report["nodes"])
    code, kind, text = served.get(f"/headroom/report/{pid}?format=csv")
    assert code == 200 and kind == "text/csv"
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["node"] for r in rows] == ["1", "2"] and rows[1]["class_type"] == "HeadroomMemoryMonitor"
    assert "error" in served.get_json(f"/headroom/report/{pid}?format=xml", status=400)
    plan = served.get_json(f"/headroom/plan/{pid}")
    assert plan["state"] == "planned" and plan["preflight"]["level"] == "ok"
    assert [s["node"] for s in plan["plan"]["steps"]] == ["1", "2"]
    residency = served.get_json(f"/headroom/residency/{pid}")  # no model: nothing to move
    assert residency["prompt_id"] == pid and residency["feasible"] and residency["planned"] == []


def test_preflight_warns_the_client_that_queued_a_workflow_that_cannot_fit(served: Served) -> None:
    monitor = served.state.monitor()
    served.state.monitor().configure(assume_vram=1 * 2**30)  # a 1 GB card: Flux cannot fit, even streamed
    prompt, node = too_big(served)

    async def scenario() -> tuple[dict, dict]:
        ws = await served.client.ws_connect("/ws?clientId=preflight-client")
        try:
            # The host's own POST /prompt path runs the on_prompt handlers before validating (the Flux
            # models are not installed here, so the host then refuses the prompt: preflight still ran).
            body = {"prompt": prompt, "client_id": "preflight-client"}
            data = served.server.trigger_on_prompt(body)
            return data, await receive(ws, "headroom.preflight")
        finally:
            await ws.close()

    try:
        data, event = served.run(scenario())
    finally:
        served.state.monitor().configure(assume_vram=None)
    assert event["level"] == "error" and event["fits"] is False
    assert node is None or (event["node"], event["class_type"]) == node
    assert "will run out of VRAM" in event["message"] and "a card with at least" in event["fix"]
    if not served.host.legacy:  # a host that honours a given prompt_id: the plan is served while queued
        assert event["prompt_id"] == data["prompt_id"]
        plan = served.get_json(f"/headroom/plan/{data['prompt_id']}")
        assert plan["preflight"] is None or plan["preflight"]["level"] == "error"
    assert monitor.pool.submit(lambda: None).result(WAIT_S) is None  # nothing left queued


def test_samples_and_node_records_reach_a_connected_client_and_sampling_stops_without_one(
    served: Served,
) -> None:
    monitor = served.state.monitor()
    served.state.monitor().configure(rate_hz=50)

    async def scenario() -> tuple[dict, dict]:
        ws = await served.client.ws_connect("/ws?clientId=sample-client")
        try:
            await served.client.get("/headroom/status")  # what the panel does when it opens
            sample = await receive(ws, "headroom.sample")
            # the executor on a worker thread, as main.py's prompt worker; its events cross to this loop
            await asyncio.to_thread(served.host.run, copy.deepcopy(PROMPT))
            node = await receive(ws, "headroom.node")
            while node["status"] == "cached":  # served from the cache: an earlier test ran the prompt
                node = await receive(ws, "headroom.node")
            return sample, node
        finally:
            await ws.close()

    try:
        sample, node = served.run(scenario())
        assert sample["rss"] > 0 and sample["t"] > 0
        assert node["node"] in ("1", "2") and node["status"] == "done" and node["duration_s"] >= 0
        # Nobody listens any more and nothing runs: the sampler thread ends by itself.
        monitor.demand_until = 0.0
        monitor.telemetry.last_activity = -1e9
        thread = monitor.sampler._thread
        thread.join(WAIT_S)
        assert not thread.is_alive() and not monitor.sampler.running
    finally:
        served.state.monitor().configure(rate_hz=1)


def test_the_ram_ledger_of_a_run_sets_prediction_against_the_os_per_node(served: Served) -> None:
    served.state.monitor().configure(
        assume_vram=8 * 2**30
    )  # a card to plan for: the guard runs with the plan
    served.post_json("/headroom/ram_budget", {"value": "96GB"})
    try:
        prompt = copy.deepcopy(PROMPT)
        prompt["1"]["inputs"]["color"] = (
            0x123456  # not the other tests' prompt: nothing served from the cache
        )
        result = served.host.run(prompt, prompt_id="ram-ledger")
    finally:
        served.state.monitor().configure(assume_vram=None)
        served.state.configure_ram_budget(None)
    ledger = served.get_json(f"/headroom/ram/{result.prompt_id}")
    assert ledger["prompt_id"] == "ram-ledger" and ledger["planned"] is True
    assert ledger["budget"]["ram"] == 96 * 2**30 and ledger["budget"]["source"] == "setting"
    assert [r["node"] for r in ledger["nodes"]] == ["1", "2"]
    assert [r["class_type"] for r in ledger["nodes"]] == ["EmptyImage", "HeadroomMemoryMonitor"]
    for record in ledger["nodes"]:  # the OS's figure and the plan's, at the node's end
        assert record["how"] == "RssAnon" and record["anon"] > 100 * 2**20 and record["pinned"] == 0
        assert record["predicted_anon"] >= ledger["baseline"] > 0
        assert record["budget"] == 96 * 2**30 and record["over"] is False and record["actions"] == []
    assert ledger["nodes"][-1]["phase"] == "done"
    after = ledger["after"]  # no model: nothing to release, and nothing moved
    assert after["moves"] == 0 and after["idle"] == 0 and after["baseline"] == ledger["baseline"]


def test_the_ram_budget_setting_is_validated_and_the_environment_variable_wins(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HEADROOM_RAM_BUDGET", raising=False)
    try:
        machine = served.get_json("/headroom/ram_budget")
        assert machine["budget"]["source"] == "machine" and machine["setting"] is None
        assert machine["env"] is None and machine["note"] == ""
        body = served.post_json("/headroom/ram_budget", {"value": "3GB"})
        assert body["budget"]["ram"] == 3 * 2**30 and body["budget"]["source"] == "setting"
        assert body["setting"] == 3 * 2**30 and served.state.ram_budget().ram == 3 * 2**30
        assert served.post_json("/headroom/ram_budget", {"value": 2.5})["budget"]["ram"] == int(2.5 * 2**30)
        for bad, says in [
            ({"value": "lots"}, "not a size"),
            ({"value": "-4GB"}, "not a size"),
            ({"value": "0.1"}, "out of range: write a size from 512.00 MiB to 64.00 TiB"),
            ({"value": "1e308"}, "not a size"),  # were 500s: an OverflowError in bytes
            ({"value": 1e308}, "not a size"),
            ({"value": "1e300GB"}, "not a size"),
            ({"value": True}, "send"),
            ({"value": None}, "send"),
            ({"other": "3GB"}, "send"),
            ({"value": "9" * 40}, "send"),
            ("not json", "send"),
        ]:
            assert says in served.post_json("/headroom/ram_budget", bad, status=400)["error"], bad
        assert served.state.ram_budget().ram == int(2.5 * 2**30)  # a refused value changes nothing

        monkeypatch.setenv("HEADROOM_RAM_BUDGET", "2GB")  # the server's environment wins over the setting
        body = served.post_json("/headroom/ram_budget", {"value": "3GB"})
        assert body["budget"]["ram"] == 2 * 2**30 and body["budget"]["source"] == "HEADROOM_RAM_BUDGET"
        assert body["setting"] == 3 * 2**30 and "wins over this setting" in body["note"]
        for bad, says in (("plenty", "not a size"), ("1e308", "not a size"), ("0", "out of range")):
            monkeypatch.setenv("HEADROOM_RAM_BUDGET", bad)  # a bad variable is ignored, and said so
            body = served.get_json("/headroom/ram_budget")
            assert body["budget"]["source"] == "setting" and says in body["note"], body
            assert f"HEADROOM_RAM_BUDGET={bad!r}" in body["note"]
            served.get_json("/headroom/status")  # answers (was a 500 with 1e308)
        monkeypatch.delenv("HEADROOM_RAM_BUDGET")

        body = served.post_json("/headroom/ram_budget", {"value": " Auto "})
        assert body["budget"]["source"] == "machine" and body["setting"] is None
    finally:
        served.state.configure_ram_budget(None)


def test_memory_history_is_off_by_default_and_clearly_unavailable_without_cuda(served: Served) -> None:
    status = served.get_json("/headroom/memory_history")
    assert status["armed"] is False and status["recording"] is None and status["files"] == {}
    if status["available"]:
        pytest.skip("this machine has CUDA: the GPU check records one (scripts/gpu-check)")
    assert "no CUDA device" in status["reason"]
    refused = served.post_json("/headroom/memory_history", {"record": True}, status=409)
    assert refused["error"] == status["reason"] and refused["armed"] is False
    assert "send" in served.post_json("/headroom/memory_history", {"record": "yes"}, status=400)["error"]
    assert served.get("/headroom/memory_history/some-prompt")[0] == 404


def test_will_it_fit_answers_both_ways_without_queueing(served: Served) -> None:
    """POST /headroom/fit: the open workflow checked on the server's card, nothing queued or run."""
    assert "error" in served.post_json("/headroom/fit", {"prompt": "no"}, status=400)
    served.state.monitor().configure(assume_vram=1 * 2**30)
    try:
        small = served.post_json("/headroom/fit", {"prompt": copy.deepcopy(PROMPT)})
        prompt, node = too_big(served)
        big = served.post_json("/headroom/fit", {"prompt": prompt})
    finally:
        served.state.monitor().configure(assume_vram=None)
    assert small["card"].startswith("assumed card") and small["verdict"]["fits"] is True
    assert small["verdict"]["budget_vram"] > 0 and small["vram_peak"] is not None
    # the time names its card and how it was chosen, what it counts and its range (issue #39); an
    # assumed VRAM names no device, so the card is the plan's assumed one
    time = big["time"]
    assert time["card_source"] == "assumed" and time["card"] and time["left_out"]
    assert big["verdict"]["fits"] is False and big["verdict"]["level"] == "error"
    assert node is None or (big["verdict"]["node"], big["verdict"]["class_type"]) == node
    skipped = served.post_json("/headroom/fit", {"prompt": copy.deepcopy(PROMPT)})  # no card to check on
    assert skipped["verdict"]["fits"] is None and "HEADROOM_ASSUME_VRAM" in skipped["verdict"]["message"]


def test_will_it_fit_offers_a_latent_that_then_fits(served: Served) -> None:
    """The official SDXL example on a 1.4 GB card: the answer's remedies, each planned again; the latent's
    changes made to the prompt, the route says it fits, with the peak the remedy predicted."""
    root = Path(__file__).resolve().parents[2] / "example_workflows" / "api"
    prompt = json.loads((root / "SDXL on an 8 GB card.json").read_text())
    served.state.monitor().configure(assume_vram=int(1.4 * 2**30))
    try:
        big = served.post_json("/headroom/fit", {"prompt": copy.deepcopy(prompt)})
        latent = big["remedies"][0]
        for change in latent["changes"]:
            prompt[change["node"]]["inputs"][change["input"]] = change["value"]
        after = served.post_json("/headroom/fit", {"prompt": prompt})
    finally:
        served.state.monitor().configure(assume_vram=None)
    assert big["verdict"]["fits"] is False and latent["kind"] == "latent" and latent["fits"] is True
    assert [c["input"] for c in latent["changes"]] == ["width", "height"]
    assert after["verdict"]["fits"] is True and after["remedies"] == []
    assert after["vram_peak"] == latent["vram_peak"]


def test_on_a_server_without_a_card_the_sidebar_names_one(served: Served) -> None:
    """M6: "gpu" in the body plans for that card of the table; an unknown one is refused naming them."""
    root = Path(__file__).resolve().parents[2] / "example_workflows" / "api"
    prompt = json.loads((root / "SDXL on an 8 GB card.json").read_text())
    unnamed = served.post_json("/headroom/fit", {"prompt": copy.deepcopy(prompt)})
    assert unnamed["verdict"]["fits"] is None  # this test server has no CUDA device and assumes none
    named = served.post_json("/headroom/fit", {"prompt": copy.deepcopy(prompt), "gpu": "RTX 4060"})
    assert named["verdict"]["fits"] is True and "RTX 4060" in named["card"] and "chosen" in named["card"]
    assert named["verdict"]["budget_vram"] == 8 * 2**30 - 2**29
    assert (
        named["card"]
        == served.post_json("/headroom/fit", {"prompt": prompt, "gpu": "NVIDIA GeForce RTX 4060"})["card"]
    )
    for bad in ("Voodoo 5 6000", 42, "x" * 500):
        refused = served.post_json("/headroom/fit", {"prompt": copy.deepcopy(prompt), "gpu": bad}, status=400)
        assert "unknown card" in refused["error"] and "RTX 4090" in refused["error"]


def test_a_run_the_ram_guard_did_not_measure_is_an_answer_not_a_404(served: Served) -> None:
    result = served.host.run(copy.deepcopy(PROMPT))  # no card to plan for: no plan, no RAM ledger
    ledger = served.get_json(f"/headroom/ram/{result.prompt_id}")
    assert ledger["measured"] is False and ledger["nodes"] == [] and "did not measure" in ledger["note"]
    assert "error" in served.get_json("/headroom/ram/never-queued", status=404)


def test_status_answers_while_a_hostile_prompt_is_planned(served: Served) -> None:
    """The preflight plans a POSTed prompt on its own thread, never on the server's event loop: while a
    plan is in progress (held open here until the status requests are answered), /headroom/status
    answers every time. Were planning on the loop, the held plan would block every route and this test
    would run out of its deadline. The latencies are measured (bench/results/hostile_status.md), not
    asserted."""
    import threading
    import time

    monitor = served.state.monitor()
    started, release, done = threading.Event(), threading.Event(), threading.Event()
    planned: list[Any] = []

    def held(prompt: dict[str, Any]) -> Any:
        started.set()
        try:
            planned.append(type(monitor).plan_for(monitor, prompt))  # the real planning, on the pool thread
            return planned[-1]
        finally:
            release.wait(WAIT_S)
            done.set()

    async def scenario() -> list[float]:
        prompt = hostile_prompt(
            chain=300, expression="ComfyMathExpression" in served.host.nodes.NODE_CLASS_MAPPINGS
        )
        body = {"prompt": prompt, "client_id": "hostile"}
        post = asyncio.ensure_future(served.client.post("/prompt", json=body))
        async with asyncio.timeout(WAIT_S):
            while not started.is_set():
                await asyncio.sleep(0.005)
        latencies = []
        for _ in range(20):
            began = time.perf_counter()
            response = await served.client.get("/headroom/status")
            assert response.status == 200 and "latest" in await response.json()
            latencies.append(time.perf_counter() - began)
            assert not done.is_set(), "answered while the plan was in progress"
        release.set()
        await (await post).read()
        return latencies

    served.state.monitor().configure(assume_vram=8 * 2**30)
    monitor.plan_for = held  # type: ignore[method-assign]
    try:
        latencies = served.run(scenario())
        assert done.wait(WAIT_S)
    finally:
        release.set()
        del monitor.plan_for
        served.state.monitor().configure(assume_vram=None)
    assert len(latencies) == 20 and planned and planned[0][1].message
    most = max(latencies) * 1e3
    print(f"hostile prompt: /headroom/status answered 20 times while planned, max {most:.1f} ms")
    print(f"hostile prompt: the preflight said: {planned[0][1].message}")
