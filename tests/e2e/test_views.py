"""What the panels and toasts say, in a real browser (#16 items 5, 6, 7, 14, 15 and the top-bar meter):
nodes named by their titles and found by a click, preflight figures that add up and name the latent,
a chart with round GiB ticks, a time axis and one colour per series, a free button that tells the truth
on a CPU-only server, a timeline header with the budget and the card, and a meter in the top bar.

One browser session (views.mjs) serves every test here; each test checks one item of what it saw.
The server assumes a 1 GB card (HEADROOM_ASSUME_VRAM=1GB, see headroom_testing.browser_server)."""

from __future__ import annotations

import colorsys
import json
import re
from typing import Any

import pytest

from headroom_testing.browser_server import ROOT, Server

pytestmark = pytest.mark.e2e
PROMPT = {
    "1": {
        "class_type": "EmptyImage",
        # a colour no other test's EmptyImage has: on the shared server the host would serve it cached
        # (test_browser.py's), and the sidebar lists only the nodes that ran
        "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 3050329},
        "_meta": {"title": "Blank canvas"},
    },
    "2": {
        "class_type": "HeadroomMemoryMonitor",
        "inputs": {"value": ["1", 0]},
        "_meta": {"title": "Watch memory"},
    },
    "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
    "4": {"class_type": "PreviewImage", "inputs": {"images": ["2", 2]}},
}


@pytest.fixture(scope="module")
def seen(comfy_server: Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("views")
    prompt_file, flux_file = folder / "prompt.json", folder / "flux.json"
    prompt_file.write_text(json.dumps(PROMPT))
    flux = json.loads(
        (ROOT / "example_workflows" / "api" / "Flux Dev 2048px with Tiled VAE decode.json").read_text()
    )
    flux["27"]["_meta"] = {"title": "Poster latent"}  # the node that sets the 2048x2048 latent
    flux_file.write_text(json.dumps(flux))
    result = comfy_server.browser("views.mjs", prompt_file, flux_file)
    print(json.dumps(result, indent=1))
    assert result["pageErrors"] == [], result["pageErrors"]  # no page error of ours, in any file
    return result


def found(click: dict[str, Any] | None) -> bool:
    """The node was off screen and unselected before the click, selected and on screen after it."""
    return (
        bool(click)
        and not click["before"]["visible"]
        and click["after"]
        == {
            "exists": True,
            "selected": True,
            "visible": True,
        }
    )


def test_the_sidebar_names_nodes_by_title_and_a_click_finds_them(seen: dict[str, Any]) -> None:
    rows = seen["sidebarRows"]
    assert any(r.startswith("Watch memory") for r in rows) and any("Blank canvas" in r for r in rows)
    assert not any(re.match(r"#\d", r) for r in rows), rows  # no hidden ids up front
    assert seen["sidebarLinks"] == 1 and found(seen.get("sidebarClick")), seen.get("sidebarClick")


def test_the_timeline_names_nodes_by_title_and_a_click_finds_them(seen: dict[str, Any]) -> None:
    cells = seen["timelineNodeCells"]
    assert "Blank canvas (EmptyImage)" in cells and "Watch memory (HeadroomMemoryMonitor)" in cells, cells
    assert not any(c.isdigit() for c in cells), cells  # not "1", "2": the ids it showed before
    assert seen["timelineLinks"] == 1 and found(seen.get("timelineClick")), seen.get("timelineClick")


def test_the_timeline_header_shows_the_budget_and_the_card(seen: dict[str, Any]) -> None:
    header = seen["timelineHeader"]
    assert "Plan fits" in header
    assert "assumed card (HEADROOM_ASSUME_VRAM) · 1.00 GiB" in header, header
    assert "budget 0.50 GiB usable (0.50 GiB reserved)" in header, header


def test_the_preflight_toast_names_the_latent_and_its_figures_agree(seen: dict[str, Any]) -> None:
    text = seen["preflightToast"]
    assert "will run out of VRAM" in text and "(node " not in text  # named as the canvas names them
    assert "2048×2048 latent set by Poster latent" in text, text
    assert text.index("a smaller latent at Poster latent") < text.index("a card with at least"), text
    need = re.search(r"The whole workflow needs (\d+\.\d\d) GiB", text)
    card = re.search(
        r"a card with at least (\d+\.\d\d) GiB of VRAM \((\d+\.\d\d) GiB usable \+ the (\d+\.\d\d)", text
    )
    assert need and card, text
    assert card[2] == need[1] and float(card[1]) == pytest.approx(float(card[2]) + float(card[3]), abs=0.011)
    assert "a 1.00 GiB card leaves 0.50 GiB usable" in text
    assert "MiB" not in text  # one unit throughout
    assert any("Poster latent" in b for b in seen["toastLinks"]) and found(seen.get("toastClick"))


def hue(color: str) -> float:
    r, g, b = (int(color.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4))
    return colorsys.rgb_to_hsv(r, g, b)[0] * 360


def test_the_chart_has_round_gib_ticks_a_time_axis_and_a_colour_per_series(seen: dict[str, Any]) -> None:
    chart = seen["chart"]
    ticks = chart["yTicks"]
    assert ticks and all(re.fullmatch(r"\d+(\.\d+)? (GiB|MiB)", t) for t in ticks), chart["texts"]
    # in MiB: 512 MiB steps read "512 MiB, 1 GiB, 1.5 GiB, 2 GiB" (the step is what must be round)
    sizes = [round(float(t.split()[0]) * (1024 if t.endswith("GiB") else 1)) for t in ticks]
    step = sizes[0]
    assert step & (step - 1) == 0 and sizes == [step * (i + 1) for i in range(len(sizes))]  # 2, 4, 6, 8
    assert chart["xTicks"][0] == "now" and all(re.fullmatch(r"-\d+ (s|min)", t) for t in chart["xTicks"][1:])
    assert len(chart["xTicks"]) >= 3
    legend = {item["text"].split(" ")[1]: item["colors"] for item in chart["legend"]}
    rss, ram = legend["RSS"][0], legend["RAM"][0]  # "process RSS ...", "system RAM used ..."
    gap = abs(hue(rss) - hue(ram))
    assert min(gap, 360 - gap) > 45, (rss, ram)
    assert len(set(chart["strokes"])) == len(chart["strokes"])


def test_the_sidebar_has_a_free_button_that_tells_the_truth_without_a_gpu(seen: dict[str, Any]) -> None:
    assert seen["freeButton"]["count"] == 1 and "free RAM" in seen["freeButton"]["text"], seen["freeButton"]
    toast = seen["freeToast"]
    assert "models unloaded" in toast and "RAM freed" in toast and "no GPU on this server" in toast, toast
    assert "VRAM freed" not in toast


def test_the_top_bar_shows_a_memory_meter_that_a_setting_turns_off(
    seen: dict[str, Any], comfy_server: Server
) -> None:
    meter = seen["meter"]
    assert meter["count"] == 1, meter
    assert re.search(r"RSS \d", meter["text"]) and re.search(r"RAM \d.* / \d", meter["text"]), meter["text"]
    assert meter["box"]["y"] < 60 and meter["box"]["height"] > 8  # in the top bar, visible
    assert (meter["afterOff"], meter["afterOn"]) == (0, 1)
    for name in ("sidebar.png", "timeline.png", "toast-preflight.png", "topbar-meter.png"):
        assert (comfy_server.artifacts / name).stat().st_size > 2_000, name
