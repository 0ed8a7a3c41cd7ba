"""Fuzz tier: random bodies, ids and queries to every Headroom route on the host's own PromptServer
(issue #43), loopback only. Whatever arrives, no route answers 500 (a 4xx names what is wrong), and the
preflight of POST /prompt never fails. Derandomized (a fixed seed) and bounded: the same examples on every
machine, about a minute on a shared 2-core machine."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from headroom_testing.served import Served

pytestmark = pytest.mark.host
BOUNDED = settings(
    max_examples=60,
    deadline=None,  # a plan of a random prompt is quick; the count bounds the run, not a clock
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
CLASSES = [
    "KSampler", "CheckpointLoaderSimple", "VAELoader", "UNETLoader", "CLIPLoader", "LoraLoader", "VAEDecode",
    "EmptyLatentImage", "EmptySD3LatentImage", "SaveImage", "PreviewImage", "ComfyMathExpression",
    "HeadroomStreamingSampler", "HeadroomOffloadLoader", "HeadroomTiledVAEDecode", "HeadroomStreamModel",
    "HeadroomMemoryMonitor", "NoSuchNode",
]  # fmt: skip
INPUTS = [
    "model", "clip", "vae", "samples", "images", "latent_image", "positive", "negative", "ckpt_name",
    "vae_name", "unet_name", "lora_name", "checkpoint", "diffusion_model", "steps", "width", "height",
    "batch_size", "length", "seed", "cfg", "denoise", "vram_budget", "expression", "values.a", "value",
]  # fmt: skip
NAMES = [
    "/etc/passwd", "../../../../etc/passwd", "..\\..\\windows\\win.ini", "a.safetensors", "", "auto",
    "sd_xl_base_1.0.safetensors", "x" * 300, "=HYPERLINK(1)", "\x00", "0.001", "1e308", "9**9**9",
]  # fmt: skip
LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([10**400, -(10**30), 2**64, 0, -1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(NAMES),
    st.text(max_size=20),
)
JSON = st.recursive(
    LEAF, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip
NODE_ID = st.one_of(st.sampled_from(["1", "2", "3", "4"]), st.text(max_size=8))
LINK = st.tuples(NODE_ID, st.integers(-2, 9)).map(list)
INPUT_MAP = st.dictionaries(st.sampled_from(INPUTS), st.one_of(LINK, LEAF, JSON), max_size=8)
NODE = st.fixed_dictionaries(
    {"class_type": st.one_of(st.sampled_from(CLASSES), st.text(max_size=10), LEAF)},
    optional={"inputs": st.one_of(INPUT_MAP, JSON)},
)
PROMPT = st.dictionaries(NODE_ID, st.one_of(NODE, JSON), min_size=1, max_size=6)
RAW = st.one_of(
    st.sampled_from(["", "{", "[" * 400 + "]" * 400, "null", '{"prompt": ' + "[" * 300 + "]" * 300 + "}"]),
    st.text(max_size=200),
)
BODY = st.one_of(
    st.fixed_dictionaries({"prompt": PROMPT}).map(json.dumps),
    st.fixed_dictionaries({"value": st.one_of(LEAF, JSON)}).map(json.dumps),
    st.fixed_dictionaries({}, optional={"record": JSON, "stop": JSON}).map(json.dumps),
    JSON.map(json.dumps),
    RAW,
)
POSTS = ["/headroom/fit", "/headroom/ram_budget", "/headroom/memory_history"]
GETS = [
    "/headroom/plan/{}", "/headroom/report/{}", "/headroom/report/{}?format={}", "/headroom/residency/{}",
    "/headroom/ram/{}", "/headroom/memory_history/{}", "/headroom/status?since={}&limit={}",
    "/headroom/status?limit={}", "/headroom/runs", "/headroom/ram_budget", "/headroom/memory_history",
]  # fmt: skip
PART = st.one_of(
    st.text(
        st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters="/?#%"),
        min_size=1,
        max_size=140,
    ),
    st.sampled_from(["..", "nan", "-1", "0", "99999999", "inf", "csv", "json"]),
)  # noqa: E501


@pytest.fixture(scope="module")
def card(served: Served) -> Any:
    """Plans made on an assumed 8 GB card (without one, a fit check plans nothing)."""
    served.state.monitor().configure(assume_vram=8 * 2**30)
    yield served
    served.state.monitor().configure(assume_vram=None)


def status_of(served: Served, method: str, path: str, body: str = "") -> tuple[int, str]:
    async def send() -> tuple[int, str]:
        headers = {"Content-Type": "application/json"}
        if method == "GET":
            response = await served.client.get(path)
        else:
            response = await served.client.post(
                path, data=body.encode("utf-8", "surrogatepass"), headers=headers
            )
        return response.status, await response.text()

    return served.run(send())


FLUX = json.loads(
    (
        Path(__file__).resolve().parents[2] / "example_workflows" / "api" / "Flux Dev text to image.json"
    ).read_text()
)  # noqa: E501


def flux_with(class_type: str, name: str, value: str) -> str:
    """The Flux template's API prompt as JSON text, one input of one node replaced by raw JSON ``value``."""
    node = next(nid for nid, n in FLUX.items() if n["class_type"] == class_type)
    marker = "__VALUE__"
    prompt = {**FLUX, node: {**FLUX[node], "inputs": {**FLUX[node]["inputs"], name: marker}}}
    return json.dumps({"prompt": prompt}).replace(json.dumps(marker), value)


@BOUNDED
@given(route=st.sampled_from(POSTS), body=BODY)
@example(route="/headroom/fit", body="[" * 100_000 + "]" * 100_000)  # the round's findings, always tried
@example(route="/headroom/fit", body=flux_with("KSampler", "steps", "1" + "0" * 400))
@example(route="/headroom/fit", body=flux_with("EmptySD3LatentImage", "width", "1e400"))
@example(route="/headroom/ram_budget", body="{" * 100_000)
def test_no_post_body_gets_a_500(card: Served, route: str, body: str) -> None:
    code, text = status_of(card, "POST", route, body)
    assert code < 500, (route, body[:300], text[:500])
    if code == 400:
        assert json.loads(text)["error"], text


@BOUNDED
@given(template=st.sampled_from(GETS), parts=st.lists(PART, min_size=2, max_size=2))
def test_no_get_gets_a_500(card: Served, template: str, parts: list[str]) -> None:
    from urllib.parse import quote

    path = template.format(*(quote(p, safe="") for p in parts))
    code, text = status_of(card, "GET", path)
    assert code < 500, (path, text[:500])


@BOUNDED
@given(prompt=PROMPT)
def test_the_preflight_of_any_posted_prompt_never_fails(
    card: Served, prompt: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """POST /prompt: the host answers as it does (its own validation); Headroom's preflight, run before and
    after it, logs no failure, and its queue is through at the end."""
    monitor = card.state.monitor()
    with caplog.at_level(logging.ERROR, logger="headroom"):
        caplog.clear()
        status_of(card, "POST", "/prompt", json.dumps({"prompt": prompt}))
        assert monitor.pool.submit(lambda: None).result(60) is None
    card.server.prompt_queue.wipe_queue()
    assert not [r for r in caplog.records if r.name == "headroom"], caplog.text
