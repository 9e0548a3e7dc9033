"""The app's colours for what a count means, in the team's words.

"runs per call" (``runs/call``) is how many times one call executes a collective;
"collective equations" is how many collectives the jaxpr holds. Red when collectives run
inside a loop (they run once per chunk), green when each runs once per call.
"""

from __future__ import annotations

from typing import Any

IN_LOOP = "bold red"
ONCE = "bold green"


def loop_style(in_loop: Any) -> str:
    """:data:`IN_LOOP` when ``in_loop`` is true (a count of collectives in loops, or a flag), else :data:`ONCE`."""
    return IN_LOOP if in_loop else ONCE
