"""Two arrays added in layouts that do not agree: the partitioner falls back to gathering one whole.

``a`` is split as ``P('y', None, 'x')`` and ``b`` as ``P(None, ('x', 'y'), None)`` on a 4x2
mesh. No efficient reshard takes one layout to the other, so while compiling ``add`` XLA's
partitioner logs "Involuntary full rematerialization" and gathers the whole of one operand onto
every device before slicing it again. ``shardscope check demos/reshard_clash.py --function add``
shows that log line as a finding at the add's line (both layouts in mesh terms, the bytes, the
gathers that carry it out, the fix compiled) and exits 1; ``add_fixed`` gives ``a`` the layout
of ``b`` as it comes in: no warning, no collective.
"""

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import shardscope

# shardscope sets the CPU device count before importing this file: a module-level mesh works.
mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))
rows_split = NamedSharding(mesh, P("y", None, "x"))
columns_split = NamedSharding(mesh, P(None, ("x", "y"), None))
a = jax.ShapeDtypeStruct((4, 16, 8), jnp.float32, sharding=rows_split)
b = jax.ShapeDtypeStruct((4, 16, 8), jnp.float32, sharding=columns_split)


@shardscope.program(args=(a, b))
@jax.jit
def add(a, b):
    return a + b


@shardscope.program(args=(jax.ShapeDtypeStruct((4, 16, 8), jnp.float32, sharding=columns_split), b))
@jax.jit
def add_fixed(a, b):
    return a + b
