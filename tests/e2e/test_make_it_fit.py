"""Make it fit (#42) in a real browser, in both node renderers: the official Wan 2.2 14B example on an RTX
4060 chosen in the sidebar (M6), its latent made too large; the answer's remedies, Copy, Apply (the
canvas made to match, one undo step, then it fits), the answer out of date after an edit (M3), and "Show"
zooming in to a readable size (M10). Each item is its own test; make_it_fit.mjs records them all."""

from __future__ import annotations

import json
from typing import Any

import pytest

from headroom_testing.browser_server import PACK, Server

pytestmark = pytest.mark.e2e
WAN = PACK / "example_workflows" / "Wan 2.2 14B text to video.json"


@pytest.fixture(scope="module", params=["classic", "vue"])
def seen(request: pytest.FixtureRequest, comfy_server: Server) -> Any:
    result = comfy_server.browser("make_it_fit.mjs", WAN, request.param)
    (comfy_server.home / f"make-it-fit-{request.param}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1)[:6000])
    assert result["errors"] == [], result["errors"]
    return result


def test_m6_a_card_is_chosen_in_the_sidebar_on_a_server_that_has_none(seen: Any) -> None:
    assert "M6 card chosen" in seen["steps"], seen["stepErrors"]
    chosen = seen["onChosen"]
    assert "RTX 4060" in chosen["text"] and chosen["cardChoice"] == "RTX 4060"
    assert chosen["fits"] == "true"  # the example as it comes fits an 8 GB card
    assert seen["onServerCard"]["severity"] == "error"  # the server's assumed 1 GB card


def test_m5_the_time_names_the_card_it_assumes_and_what_it_counts(seen: Any) -> None:
    """M5: "about 157 ms" for a CPU run that took 99 s, with no card named. The answer's time now says the
    card it is for, how that card was chosen, and what the time includes."""
    assert "M6 card chosen" in seen["steps"], seen["stepErrors"]
    time = seen["onChosen"]["time"]
    assert time.startswith("Time for RTX 4060 (the card named)") and "; includes " in time, time


def test_the_answer_offers_a_latent_and_apply_makes_the_canvas_match_it(seen: Any) -> None:
    assert "does not fit" in seen["steps"] and "Apply" in seen["steps"], seen["stepErrors"]
    assert seen["noFit"]["fits"] == "false" and seen["before"]["width"] == 1280
    kinds = [r["kind"] for r in seen["noFit"]["remedies"]]
    assert "latent" in kinds and all(r["apply"] for r in seen["noFit"]["remedies"])
    remedy = seen["remedy"]
    for change in remedy["changes"]:
        assert seen["applied"][change["input"]] == change["value"]
    assert seen["noFit"]["severity"] == "error"  # not even Headroom's plan fits
    # after Apply Headroom's plan fits (what the remedy said); ComfyUI's own loading may still run out
    # ("warn"), and the answer then offers the Headroom node that makes it run
    assert seen["afterApply"]["severity"] in ("success", "warn"), seen["afterApply"]
    assert "even with Headroom" not in seen["afterApply"]["text"]
    assert seen["applied"] != seen["before"]


def test_copy_gives_the_whole_answer_as_text(seen: Any) -> None:
    assert "Copy" in seen["steps"], seen["stepErrors"]
    text = seen["copied"]
    assert text.startswith("Headroom: ") and "will run out of VRAM" in text
    assert "To make it fit:\n  1. " in text and "Make the latent" in text


def test_apply_is_one_undo_step(seen: Any) -> None:
    assert "undo" in seen["steps"], seen["stepErrors"]
    assert seen["undoEdit"]["width"] == seen["applied"]["width"]  # the edit after Apply, undone
    assert (seen["undoApply"]["width"], seen["undoApply"]["height"]) == (1280, 720)  # Apply, in one step


def test_m3_an_edit_marks_the_answer_out_of_date(seen: Any) -> None:
    assert "M3 stale" in seen["steps"], seen["stepErrors"]
    assert seen["afterEdit"]["stale"] == "true"


def test_m10_show_zooms_in_to_a_readable_size(seen: Any) -> None:
    assert "M10 zoom" in seen["steps"], seen["stepErrors"]
    assert seen["zoomAfterShow"] >= 0.8


def test_m16_the_sidebar_answer_is_not_repeated_in_a_toast(seen: Any) -> None:
    assert "does not fit" in seen["steps"], seen["stepErrors"]
    assert seen["toastRepeats"] == 0
