"""Headroom's memory-manager core.

Pure torch + safetensors: nothing in this package imports ComfyUI (``comfy``, ``nodes``, ``server``,
``folder_paths``, ``execution``...), so it runs and is tested without a host. The tests enforce it.
"""
