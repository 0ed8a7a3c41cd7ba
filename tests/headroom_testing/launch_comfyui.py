"""Start a ComfyUI server the way a user does (``python main.py ...``), from a given root.

Usage: ``python launch_comfyui.py COMFYUI_ROOT [main.py arguments...]``. The only difference from a
plain ``python main.py`` is the placeholders for absent optional modules
(see harness.install_optional_placeholders).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from headroom_testing.harness import install_optional_placeholders  # noqa: E402

if __name__ == "__main__":
    root = Path(sys.argv[1]).resolve()
    sys.argv = [str(root / "main.py"), *sys.argv[2:]]
    sys.path.insert(0, str(root))
    install_optional_placeholders()
    runpy.run_path(str(root / "main.py"), run_name="__main__")
