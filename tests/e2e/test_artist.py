"""What an artist sees on the frontend under test (#29), in both node renderers: one browser session per
renderer (artist.mjs) records it, each test checks one item. The frontend is a parameter of the tier
(HEADROOM_E2E_FRONTEND=1.49.6 or 1.58.1; unset: the host's own), so the same tests run on each."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from headroom_testing.browser_server import PACK, ROOT, TINY_CHECKPOINT, Server

pytestmark = pytest.mark.e2e

PROMPT: dict[str, Any] = {
    "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": TINY_CHECKPOINT}},
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a red cube", "clip": ["4", 1]}},
    "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["4", 1]}},
    "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
    "11": {"class_type": "HeadroomStreamModel", "inputs": {"model": ["4", 0]}},
    "3": {
        "class_type": "KSampler",
        "inputs": {
            "model": ["11", 0],
            "positive": ["6", 0],
            "negative": ["7", 0],
            "latent_image": ["5", 0],
            "seed": 1,
            "steps": 12,
            "cfg": 5.0,
            "sampler_name": "euler",
            "scheduler": "normal",
            "denoise": 1.0,
        },
    },  # fmt: skip
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
    "10": {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": ["8", 0]}},
    "9": {"class_type": "PreviewImage", "inputs": {"images": ["10", 0]}},
}
BIG = ROOT / "example_workflows" / "api" / "Flux Dev text to image.json"
OFFLOAD_EXAMPLES = [  # the served pack's (HEADROOM_E2E_PACK: an older checkout's)
    PACK / "example_workflows" / f"{name}.json"
    for name in ("Flux Dev with the Offload Loader", "Wan 2.2 14B with Offload Loaders")
]


@pytest.fixture(scope="module", params=["classic", "vue"])
def seen(
    request: pytest.FixtureRequest, comfy_server: Server, tmp_path_factory: pytest.TempPathFactory
) -> Any:
    tmp = tmp_path_factory.mktemp("artist")
    prompt_file = tmp / "prompt.json"
    prompt_file.write_text(json.dumps(PROMPT))
    result = comfy_server.browser("artist.mjs", prompt_file, BIG, request.param, *OFFLOAD_EXAMPLES)
    (comfy_server.home / f"artist-{request.param}.json").write_text(json.dumps(result, indent=1))  # to debug
    print(json.dumps({k: v for k, v in result.items() if k != "liveStates"}, indent=1)[:8000])
    return result


def field(seen: dict[str, Any], name: str) -> Any:
    """What artist.mjs recorded as ``name``; a step that could not record it fails the test with its error
    (a feature the served pack lacks: HEADROOM_E2E_PACK names an older checkout)."""
    if seen.get(name) is None:
        pytest.fail(f"{name} not recorded: {seen.get('stepErrors')}")
    return seen[name]


def test_will_it_fit_answers_yes_with_the_card_peak_and_usable_vram(seen: dict[str, Any]) -> None:
    fit = field(seen, "fitA")
    assert fit["fits"] == "true", fit
    pattern = r"Fits on assumed card \(HEADROOM_ASSUME_VRAM\): peak [\d.]+ GiB of 0.50 GiB usable"
    assert re.match(pattern, fit["fitText"]), fit


def test_will_it_fit_answers_no_and_names_the_node_with_links(seen: dict[str, Any]) -> None:
    fit = field(seen, "fitB")
    assert fit["fits"] == "false" and "will run out of VRAM" in fit["fitText"], fit
    assert fit["fitLinks"] and fit["fitLinks"][0] == "6", fit  # CLIP Text Encode, a link that finds it


def test_the_verdict_stays_with_its_workflow(seen: dict[str, Any]) -> None:
    """N10: a warning is kept in the sidebar with its workflow; another workflow shows its own."""
    kept = field(seen, "afterPreflightB")
    assert kept["fits"] == "false", kept  # the preflight of the queued run, kept after the toast
    back = field(seen, "backToA")
    assert back["fits"] == "true" and back["fitText"].startswith("Fits"), back


def test_a_running_node_is_running_not_error(seen: dict[str, Any]) -> None:
    """N1: while the run goes the timeline says "running" for the node that runs, never "error"."""
    states = [s for line in field(seen, "liveStates") for s in line.split(",") if s]
    assert "error" not in states, seen["liveStates"]
    assert "running" in states, seen["liveStates"]
    assert field(seen, "runA")["event"] == "execution_success"


def test_the_timeline_follows_the_open_workflow(seen: dict[str, Any]) -> None:
    """N9: another workflow shows no rows of A's run (and no dead links); back on A, A's run again."""
    assert len(field(seen, "afterRunA")["timelineRows"]) == 9
    other = field(seen, "openB")
    assert other["timelineEmpty"] and other["timelineRows"] == [], other
    assert len(field(seen, "backToA")["timelineRows"]) == 9, seen["backToA"]


def test_the_ram_budget_is_sent_when_typing_stops(seen: dict[str, Any]) -> None:
    """N4: typing "auto" sends nothing new (no error toasts); typing "16GB" sends 16GB only."""
    posts, toasts = field(seen, "ramAutoPosts"), field(seen, "ramAutoToasts")
    assert posts in ([], ["auto"]) and toasts == [], (posts, toasts)
    assert field(seen, "ram16Posts") == ["16GB"], seen["ram16Posts"]


def test_no_404_from_headroom_routes(seen: dict[str, Any]) -> None:
    """N11: a run the RAM guard did not measure is no red 404 line in the console."""
    assert field(seen, "ram404") == [], seen["ram404"]


def test_the_preflight_toast_has_show_buttons(seen: dict[str, Any]) -> None:
    """N2: on every frontend the toast offers a button per node it names."""
    assert any(b.startswith("Show ") for b in field(seen, "toastButtons")), seen["steps"]


def test_run_after_a_fit_check_does_not_repeat_its_warning(seen: dict[str, Any]) -> None:
    """On 1.58 "Will it fit?" and then Run showed the same warning in two toasts at once. Here the host
    refuses the queued workflow (its files are missing), so its preflight is dropped (#43): no toast for
    it, and never two of the fit check's warning (the repeat of an accepted run's warning is
    tests/js/artist.test.mjs's)."""
    assert field(seen, "refusedToasts") == 0 and field(seen, "sameWarningToasts") <= 1, seen["steps"]


def test_show_puts_the_node_above_the_open_bottom_panel(seen: dict[str, Any]) -> None:
    """N14: the node found from the timeline lands in the middle of the canvas area the open panel leaves
    visible (centerOnNode alone centres it on the whole canvas, which runs under the panel)."""
    shown = field(seen, "shown")
    assert shown["panelTop"] is not None and shown["selected"], shown
    visible = shown["panelTop"] - shown["canvasTop"]
    assert abs(shown["nodeCentreY"] - (shown["canvasTop"] + visible / 2)) < 0.1 * visible, shown


def test_the_sidebar_list_has_no_bare_colon(seen: dict[str, Any]) -> None:
    """N17: cached nodes say "cached", not "CLIP Text Encode (Prompt):"."""
    rows = field(seen, "afterRerunA")["panelRows"]
    assert rows and not any(r.rstrip().endswith(":") for r in rows), rows


def test_the_meter_shows_gpu_load_and_stays_clear_at_1024_px(seen: dict[str, Any]) -> None:
    """N13 and the meter's GPU part: load and temperature, and no control of the frontend under it."""
    meter = field(seen, "meter")
    assert meter and meter["visible"] and "GPU 63% 71°C" in meter["text"], meter
    assert meter["overlaps"] == [], meter


def test_our_buttons_are_styled_on_every_frontend(seen: dict[str, Any]) -> None:
    """N16: "Unload models", "Will it fit?" and the toasts' "Show" buttons are not bare native buttons."""
    for button in field(seen, "buttons"):
        assert not button.get("missing") and button["radius"] >= 4, button
        assert button["border"] == "solid" and button["cursor"] == "pointer", button


def test_vue_nodes_show_this_runs_badge(seen: dict[str, Any]) -> None:
    """N3: a workflow built in the Vue renderer gets badges, and a re-run's figures replace the last."""
    badge = field(seen, "nodeBadge")
    if badge["dom"] is None:
        pytest.skip("no Vue node on screen: the classic renderer (badges on the canvas), or 1.27's Vue one")
    assert badge["expected"].startswith("RSS ") and badge["expected"] in badge["dom"], badge


def test_the_node_text_survives_a_tab_switch_a_reload_and_a_renderer_toggle(seen: dict[str, Any]) -> None:
    """N7: VRAM Stats' "last run" text is still on the node after each."""
    for when in ("textAfterSwitch", "textAfterReload", "textAfterToggle"):
        text = field(seen, when)["widget"] or ""
        assert text.startswith("Headroom memory at node 10"), (when, seen[when])


def test_a_new_vram_stats_node_is_big_enough_for_its_report(seen: dict[str, Any]) -> None:
    """N8: it was created 140×116 px, showing 2 of its 15 report lines."""
    width, height = field(seen, "newMonitorSize")
    assert width >= 440 and height >= 340, seen["newMonitorSize"]


def test_the_offload_examples_have_no_overlapping_nodes_in_either_renderer(seen: dict[str, Any]) -> None:
    """N6: they overlapped by about 40 px in the Vue renderer (laid out for the classic one's sizes)."""
    assert len(field(seen, "exampleOverlaps")) == 2
    if "not rendered" in seen["exampleOverlaps"].values():
        pytest.skip("this frontend's Vue renderer draws no nodes of a workflow loaded while it is on (1.27)")
    version = tuple(int(x) for x in (seen.get("frontend") or "0.0.0").split(".")[:2])
    if seen["renderer"] == "vue" and version < (1, 41):
        # 1.27's Vue nodes were a preview: wider than the node's own size, widgets without values
        pytest.skip("the examples are laid out for the Vue renderer of 1.41 and later, not 1.27's preview")
    assert all(pairs == [] for pairs in seen["exampleOverlaps"].values()), seen["exampleOverlaps"]


def test_stream_model_says_on_the_node_what_it_streamed(seen: dict[str, Any]) -> None:
    """N15: "nothing streamed" was only in the server log; the node now says what the sampler's run did."""
    text = field(seen, "streamText")
    assert text.startswith(("streamed ", "everything fits", "not streamed")), seen["streamText"]


def test_no_internal_module_notice(seen: dict[str, Any]) -> None:
    """N12: 1.41+ printed '"scripts/widgets.js" is an internal module' for the pack's import of it."""
    assert field(seen, "consoleNotices") == [], seen["consoleNotices"]
