"""A copy of the pack for a test server leaves every virtualenv out: ``HEADROOM_VENV=.venv033`` made a
13 GB copy per server and filled the disk during a clean-clone run on ComfyUI 0.18.2."""

from __future__ import annotations

from headroom_testing import pack_copy


def test_every_virtualenv_and_build_folder_is_left_out_and_the_pack_is_not() -> None:
    names = [".venv", ".venv033", ".git", ".gpu-carry", "node_modules", "memory", "nodes", "js", "cli.py"]
    left_out = pack_copy.ignore()(".", names)
    assert left_out == {".venv", ".venv033", ".git", ".gpu-carry", "node_modules"}
    assert pack_copy.ignore("tests")(".", ["tests", "memory"]) == {"tests"}
