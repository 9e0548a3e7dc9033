"""SVG screenshots of the app: the same screen gives the same bytes, and saving never loses a file.

Rich names an SVG's CSS classes and clip paths after a hash of the segments it drew, styles
included, and Textual's styles carry per-process details (the ids of tree nodes a click
would open, made in whatever order the idle-time drawing ran): two identical screens got
different names, so ``make screenshots`` rewrote files whose picture had not changed and an SVG
snapshot could differ on an identical screen. :func:`stable_svg` renames them after a hash of
the SVG itself, which holds only what is drawn.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

from shardscope.render.exports import write_new

_UNIQUE_ID = re.compile(r"terminal-(\d+)-")
"""Rich's prefix of every class and id in an exported SVG (``terminal-1598221433-r1``)."""


def stable_svg(svg: str) -> str:
    """``svg`` with Rich's per-render prefix replaced by one made from the drawing alone."""
    found = _UNIQUE_ID.search(svg)
    if found is None:
        return svg
    old = f"terminal-{found[1]}-"
    drawing = svg.replace(old, "terminal-")
    return svg.replace(old, f"terminal-{zlib.adler32(drawing.encode('utf-8'))}-")


def save_svg(directory: Path, stem: str, svg: str) -> Path:
    """Write ``svg`` as ``directory/stem.svg`` (``stem-1.svg``, ... when taken), making the
    directory if needed; atomic, and never over an existing file (:func:`shardscope.render.exports.write_new`)."""
    directory.mkdir(parents=True, exist_ok=True)
    return write_new(directory, stem, ".svg", svg)
