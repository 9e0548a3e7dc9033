"""shardscope: see the communication plan of a chunked VJP under ``jax.shard_map``.

Importing this package is cheap: it does not import JAX, Textual or networkx. Demo files only
need :func:`demo`; the analysis lives in :mod:`shardscope.analysis`.
"""

from shardscope.demos import demo
from shardscope.errors import ShardscopeError

__all__ = ["demo", "ShardscopeError"]
__version__ = "0.1.0"
