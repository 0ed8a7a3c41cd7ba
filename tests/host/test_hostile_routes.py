"""Hostile requests to the routes on the host's own PromptServer (issue #43), loopback only.

Model names resolve only through the host's folder lists: a name it does not list (an absolute path,
``../``) and a listed link that leaves the models folders are answered alike whether or not the file
exists, and nothing of such a file (its size, its tensor names) reaches an answer. The preflight's work is
bounded: refused prompts are not planned, the same prompt is planned once, the queue refuses past its cap
and "Will it fit?" goes first. Work is counted (plans made, queue length), never timed."""

from __future__ import annotations

import asyncio
import copy
import csv
import io
import json
import os
import struct
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from headroom_testing.served import WAIT_S, Served

pytestmark = pytest.mark.host
SECRET = "SECRET_TENSOR_NAME_43"


def safetensors_bytes(tensors: dict[str, tuple[list[int], int]], data: bytes) -> bytes:
    """A safetensors file: {name: (shape, data length)} laid out one after another, then ``data``."""
    header: dict[str, Any] = {}
    offset = 0
    for name, (shape, length) in tensors.items():
        header[name] = {"dtype": "F16", "shape": shape, "data_offsets": [offset, offset + length]}
        offset += length
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


@pytest.fixture(scope="module")
def outside(served: Served, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Files outside every models folder, and links to them inside the host's vae folder."""
    folder = tmp_path_factory.mktemp("outside_models")
    damaged = folder / "damaged.safetensors"  # its header names a tensor whose bytes are not there
    damaged.write_bytes(safetensors_bytes({SECRET: ([1024, 1024], 2 * 2**20)}, b""))
    real = folder / "real.safetensors"  # a whole file: a header the planner would size from
    real.write_bytes(safetensors_bytes({"decoder.conv_in.weight": ([4, 4], 32)}, bytes(32)))
    missing = folder / "missing.safetensors"
    vae_folder = served.host.models_dir / "vae"
    links = {}
    for name, target in (("damaged", damaged), ("real", real), ("missing", missing)):
        link = vae_folder / f"escape_{name}.safetensors"
        if not link.is_symlink():
            os.symlink(target, link)
        links[f"link_{name}"] = link.name
    served.host.register_models_dir(served.host.models_dir)  # the host lists the links
    up = "../" * 16
    return {
        "abs_damaged": str(damaged),
        "abs_real": str(real),
        "abs_missing": str(missing),
        "up_damaged": up + str(damaged).lstrip("/"),
        "up_missing": up + str(missing).lstrip("/"),
        "etc_passwd": "/etc/passwd",
        "etc_missing": "/etc/no_such_file_43",
        **links,
    }


def vae_prompt(name: str) -> dict[str, Any]:
    return {
        "1": {"class_type": "VAELoader", "inputs": {"vae_name": name}},
        "2": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "3": {"class_type": "VAEDecode", "inputs": {"samples": ["2", 0], "vae": ["1", 0]}},
        "4": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}},
    }


def checkpoint_prompt(name: str) -> dict[str, Any]:
    prompt = vae_prompt(name)
    prompt["1"] = {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": name}}
    prompt["3"]["inputs"]["vae"] = ["1", 2]
    return prompt


def answer_of(served: Served, prompt: dict[str, Any], name: str) -> str:
    """The fit answer as text with the name taken out (the rest must not depend on the file)."""
    answer = json.dumps(served.post_json("/headroom/fit", {"prompt": prompt}), sort_keys=True)
    assert SECRET not in answer, answer
    for text in (name, json.dumps(name)[1:-1], Path(name).name, Path(name).stem):
        answer = answer.replace(text, "NAME")
    return answer


@pytest.mark.parametrize("make", [vae_prompt, checkpoint_prompt], ids=["VAELoader", "CheckpointLoaderSimple"])
def test_a_model_name_the_host_does_not_list_is_answered_alike_whether_or_not_it_exists(
    served: Served, outside: dict[str, str], make: Any
) -> None:
    """Issue #43, bug 1: /etc/passwd planned at 0.03 s and a missing file at 587 s; a damaged file's
    tensor names were echoed. Now no such name is looked at on disk: it is planned by its name alone."""
    served.state.monitor().configure(assume_vram=8 * 2**30)
    try:
        names = [k for k in outside if not k.startswith("link_")]
        answers = {key: answer_of(served, make(outside[key]), outside[key]) for key in names}
    finally:
        served.state.monitor().configure(assume_vram=None)
    assert len(set(answers.values())) == 1, answers
    verdict = json.loads(answers["abs_real"])["verdict"]
    assert verdict["fits"] is True and verdict["level"] == "ok", verdict


def test_a_listed_link_that_leaves_the_models_folders_is_never_read(
    served: Served, outside: dict[str, str]
) -> None:
    """The host lists a link in its vae folder; the planner does not follow it out of the models
    folders: a link to a damaged file, to a whole one and to nothing give the same answer."""
    served.state.monitor().configure(assume_vram=8 * 2**30)
    try:
        keys = ("link_damaged", "link_real", "link_missing")
        answers = {key: answer_of(served, vae_prompt(outside[key]), outside[key]) for key in keys}
    finally:
        served.state.monitor().configure(assume_vram=None)
    assert len(set(answers.values())) == 1, answers
    assert json.loads(answers["link_real"])["verdict"]["fits"] is True


def test_a_prompt_the_host_refuses_is_not_planned_nor_kept(served: Served, outside: dict[str, str]) -> None:
    """Through POST /prompt the host refuses an outside name with a 400; its plan is not made and
    /headroom/plan/{id} does not know the id (it was the way to read the answer back)."""
    monitor = served.state.monitor()
    if "preflight" in monitor.hooks:
        pytest.skip(monitor.hooks["preflight"])
    monitor.configure(assume_vram=8 * 2**30)
    made: list[Any] = []
    monitor.plan_for = lambda prompt: made.append(prompt) or type(monitor).plan_for(monitor, prompt)  # type: ignore[method-assign]
    try:
        for key in ("abs_damaged", "abs_missing", "up_damaged"):
            prompt_id = str(uuid.uuid4())
            body = {"prompt": vae_prompt(outside[key]), "prompt_id": prompt_id}
            code, text = served.run(_post(served, "/prompt", body))
            assert code == 400 and SECRET not in text, text
            assert monitor.pool.submit(lambda: None).result(WAIT_S) is None  # the queue is through
            gone = served.get_json(f"/headroom/plan/{prompt_id}", status=404)
            assert "unknown prompt" in gone["error"]
    finally:
        del monitor.plan_for
        monitor.configure(assume_vram=None)
    assert made == []


async def _post(served: Served, path: str, body: Any) -> tuple[int, str]:
    response = await served.client.post(path, json=body)
    return response.status, await response.text()


def image_prompt(width: int, color: int = 0) -> dict[str, Any]:
    return {
        "1": {
            "class_type": "EmptyImage",
            "inputs": {"width": width, "height": 8, "batch_size": 1, "color": color},
        },
        "2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}},
    }


def test_a_flood_of_prompts_is_bounded_and_will_it_fit_answers_first(served: Served) -> None:
    """Issue #43, bug 2: 300 refused prompts were all planned, one after another, and "Will it fit?" waited
    749 s behind them. Here the planning thread is held in a first plan while 300 refused, 20 identical
    and 300 distinct accepted prompts are posted: the refused are never planned, the identical once, the
    queue stops at its cap (the rest "not planned: the preflight queue is full"), and the fit check
    posted last is the next plan made."""
    monitor = served.state.monitor()
    if "preflight" in monitor.hooks:
        pytest.skip(monitor.hooks["preflight"])
    pool = monitor.pool
    started, release = threading.Event(), threading.Event()
    made: list[dict[str, Any]] = []

    def held(prompt: dict[str, Any]) -> Any:
        made.append(prompt)
        if len(made) == 1:
            started.set()
            release.wait(WAIT_S)
        return type(monitor).plan_for(monitor, prompt)

    fit_prompt = image_prompt(7, color=43)

    async def scenario() -> tuple[int, list[int], list[str]]:
        code, _ = await _post(served, "/prompt", {"prompt": image_prompt(16)})
        assert code == 200
        async with asyncio.timeout(WAIT_S):
            while not started.is_set():
                await asyncio.sleep(0.005)
        waiting = []
        for i in range(300):  # refused: width 0 is below EmptyImage's minimum
            code, _ = await _post(served, "/prompt", {"prompt": image_prompt(0, color=i)})
            assert code == 400
            waiting.append(pool.state()["waiting"])
        for _ in range(20):  # the same prompt again and again: one plan
            code, _ = await _post(served, "/prompt", {"prompt": image_prompt(17)})
            assert code == 200
        ids = []
        for i in range(300):
            ids.append(str(uuid.uuid4()))
            code, _ = await _post(served, "/prompt", {"prompt": image_prompt(100 + i), "prompt_id": ids[-1]})
            assert code == 200
            waiting.append(pool.state()["waiting"])
        fit = asyncio.ensure_future(served.client.post("/headroom/fit", json={"prompt": fit_prompt}))
        async with asyncio.timeout(WAIT_S):
            while pool.state()["urgent"] == 0:
                await asyncio.sleep(0.005)
        release.set()
        response = await fit
        return response.status, waiting, ids

    monitor.configure(assume_vram=8 * 2**30)
    monitor.plan_for = held  # type: ignore[method-assign]
    before = dict(pool.counts)
    try:
        status, waiting, ids = served.run(scenario())
        assert pool.submit(lambda: None).result(WAIT_S) is None  # the queue is through
    finally:
        release.set()
        del monitor.plan_for
        monitor.configure(assume_vram=None)
        served.server.prompt_queue.wipe_queue()  # nobody runs the accepted ones here
    counts = {k: pool.counts[k] - before.get(k, 0) for k in pool.counts}
    assert status == 200
    assert made[1] is not None and made[1]["1"]["inputs"]["color"] == 43  # the fit check went first
    assert all(p["1"]["inputs"]["width"] != 0 for p in made)  # no refused prompt planned
    assert max(waiting) <= pool.max_waiting and pool.state()["bytes"] == 0
    assert len(made) <= 2 + pool.max_waiting  # 622 posts, at most 34 plans
    assert counts["same"] == 19 and counts["full"] >= 300 - pool.max_waiting
    last = served.get_json(f"/headroom/plan/{ids[-1]}")
    assert last["state"] == "not planned" and "preflight queue is full" in last["note"]
    print(f"flood: 620 prompts posted, {len(made)} plans made, the queue at most {max(waiting)} long")


def test_csv_cells_are_never_formulas(served: Served) -> None:
    """Issue #43, bug 5: node ids such as =HYPERLINK(...) went into the CSV export as live formulas."""
    ids = ['=HYPERLINK("http://example.invalid","x")', "@SUM(1+1)", "+1", "-1", "\tx", "\rx"]
    prompt = {
        ids[0]: image_prompt(8)["1"],
        ids[1]: {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": [ids[0], 0]}},
    }
    result = served.host.run(copy.deepcopy(prompt))
    code, kind, text = served.get(f"/headroom/report/{result.prompt_id}?format=csv")
    assert code == 200 and kind == "text/csv"
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["node"] for r in rows] == ["'" + i for i in ids[:2]]
    for row in rows:
        for value in row.values():
            assert not (value or " ").startswith(("=", "+", "-", "@", "\t", "\r")), row


@pytest.mark.parametrize(
    "body, named",
    [
        ("[" * 100_000 + "]" * 100_000, "nested"),
        ('{"prompt": {"1": {"class_type": "KSampler", "inputs": {"steps": 1' + "0" * 400 + "}}}}", "steps"),
        ('{"prompt": {"1": {"class_type": "EmptyImage", "inputs": {"width": 1e400}}}}', "width"),
        (
            '{"prompt": {"1": {"class_type": "X", "inputs": {"width": ' + "[" * 150 + "]" * 150 + "}}}}",
            "width",
        ),  # noqa: E501
        ('{"prompt": {"1": {"class_type": "KSampler", "inputs": {"steps": 1' + "0" * 5000 + "}}}}", "digits"),
    ],
    ids=["nested-100k", "steps-10e400", "width-inf", "input-nested-150", "int-5000-digits"],
)
def test_unreadable_bodies_are_400_naming_the_input(served: Served, body: str, named: str) -> None:
    """Issue #43: a body nested 100,000 deep and steps: 10**400 were 500s."""

    async def send(path: str) -> tuple[int, str]:
        response = await served.client.post(path, data=body, headers={"Content-Type": "application/json"})
        return response.status, await response.text()

    served.state.monitor().configure(assume_vram=8 * 2**30)
    try:
        code, text = served.run(send("/headroom/fit"))
    finally:
        served.state.monitor().configure(assume_vram=None)
    assert code == 400 and named in json.loads(text)["error"], text
    assert len(text) < 1000
    for route in ("/headroom/ram_budget", "/headroom/memory_history"):
        code, text = served.run(send(route))
        assert code == 400, (route, text)
