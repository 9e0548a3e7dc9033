"""SVG screenshots of the app: saving one never loses a file."""

from __future__ import annotations

from pathlib import Path

from shardscope.exports import write_new


def save_svg(directory: Path, stem: str, svg: str) -> Path:
    """Write ``svg`` as ``directory/stem.svg`` (``stem-1.svg``, ... when taken), making the
    directory if needed; atomic, and never over an existing file (:func:`shardscope.exports.write_new`)."""
    directory.mkdir(parents=True, exist_ok=True)
    return write_new(directory, stem, ".svg", svg)
