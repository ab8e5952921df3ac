"""What a tool result is and how to show it small: detection, previews, JSON shapes and hints.

The offloader calls `detect` then `build_preview`; `render_shape` turns a shape into the few lines
the reference shows.
"""

from offload.content.detect import Detected, InvalidJSON, detect, gc_paused, parse_json, pause_gc, resume_gc
from offload.content.preview import Preview, build_preview
from offload.content.shape import render_shape

__all__ = ["Detected", "InvalidJSON", "Preview", "build_preview", "detect", "gc_paused", "parse_json", "pause_gc",
           "render_shape", "resume_gc"]
