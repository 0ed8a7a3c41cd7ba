"""``python -m comfyui_headroom``: the command line."""

import sys

from .cli import main

sys.exit(main())
