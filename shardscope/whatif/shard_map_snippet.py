"""The shard_map route of a jit program as code: the step inside ``jax.shard_map``, written as a
snippet with the program's own names (a diff would move the whole function and change its
shapes, which shardscope does not write into the file).

Inside ``jax.shard_map`` each device runs the step on its own rows: ``in_specs`` has one spec
per argument (the one it comes in), a reshape of a split dimension takes the device's size, the
parameters are cast to varying before the loop, the accumulator starts varying, and after the
loop each accumulated value is summed over the devices. A ``jnp.mean`` on a device is over its
own rows, so the gradients and the loss it accumulates are divided by the device count too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from shardscope.engine.hlo.fixes import argument_specs_text, named_axes


@dataclass(frozen=True)
class StepSignature:
    """What the snippet says of the whole step: its name, each argument with the spec it comes
    in, the outputs' specs (``P()``, or one per output), the devices a sum spans, and the axes
    it runs per device on where they are not all the mesh's (``axis_names``: the others stay
    with the partitioner, and the specs name only these)."""

    function: str
    arguments: tuple[tuple[str, str], ...]
    out_specs: str
    devices: int
    axis_names: tuple[str, ...] = ()
    leaves: tuple[tuple[str, tuple[str, ...]], ...] = ()  # each argument's leaves' own specs, when known
    kept: tuple[str, ...] | None = None  # the axes the specs name (None: all)

    def in_specs(self, whole: str = "", over: Sequence[str] = ()) -> str:
        """``(P(), P('data'), P('data'))``: one spec per argument; the argument ``whole`` (the
        parameters whose gradients the loop sums over ``over``) names none of ``over``: the step's
        code needs each parameter whole inside the ``shard_map``, so it enters replicated over them."""
        specs = [spec for _, spec in self.arguments]
        if whole and over and self.leaves:
            specs = [spec for _, spec in argument_specs_text(self.leaves, self.kept, (whole,), tuple(over))]
        return "(" + ", ".join(specs) + ("," if len(specs) == 1 else "") + ")"

    def split_over(self, name: str, axes: Sequence[str]) -> bool:
        """True when a leaf of the argument ``name`` comes sharded over one of ``axes``."""
        return any(set(named_axes(spec)) & set(axes) for n, leaves in self.leaves if n == name for spec in leaves)


def per_device_snippet(step: StepSignature, values: Sequence[str], axes: Sequence[str], where: str,
                       computed: frozenset[str] = frozenset(), scalings: Mapping[str, str] | None = None) -> str:
    """The lines of the shard_map route for the values ``values`` summed over ``axes`` in the
    loop at ``where``; ``computed``: those the step computes (a loss), which have nothing to cast;
    ``scalings``: whether each loss is a mean over rows (divided after its sum), a sum (not
    divided) or unknown (not divided, and the comment says when it would be)."""
    axis = repr(axes[0]) if len(axes) == 1 else repr(tuple(axes))
    losses = [v for v in values if v in computed or is_output(v)]
    root = _root([v for v in values if v not in losses])
    names = ", ".join(name for name, _ in step.arguments) or "*args"
    what = ", ".join(values) or "the summed values"
    manual = ", ".join(repr(a) for a in step.axis_names)
    lines = [f"# the sum of {what} only accumulates in the loop at {where}:",
             "# run the step per device inside jax.shard_map, each device on its own rows (a reshape of a split",
             "# dimension takes the device's size: x.reshape(MICRO, -1, ...))"]
    if step.axis_names:
        lines += [f"# over {manual} only: the specs name no other axis, which stays with the partitioner as before"]
    names_arg = f", axis_names={{{manual}}}" if step.axis_names else ""
    lines += ["@jax.jit",
              f"@jax.shard_map(mesh=mesh, in_specs={step.in_specs(root, axes)}, out_specs={step.out_specs}{names_arg})",
              f"def {step.function}({names}):"]
    if root and step.split_over(root, axes):
        lines += [f"    # {root} comes split over {axis}, the {'axis' if len(axes) == 1 else 'axes'} the loop sums over: it enters "
                  f"replicated over {'it' if len(axes) == 1 else 'them'} (P() there",
                  "    # in in_specs), whole on every device as the step's code needs it; the partitioner gathers it before",
                  "    # the shard_map, once per call"]
    if root:
        lines += [f"    local_{root} = jax.tree.map(lambda p: lax.pcast(p, {axis}, to='varying'), {root})  # before the loop",
                  f"    # read local_{root} inside the loop body instead of {root}"]
    lines += [f"    acc0 = jax.tree.map(lambda a: lax.pcast(a, {axis}, to='varying'), acc0)  # the accumulator's start"]
    divided = f" / {step.devices}" if step.devices > 1 else ""
    kinds = {loss: (scalings or {}).get(loss, "unknown") for loss in losses}
    undivided = [loss for loss in losses if kinds[loss] != "mean"]
    if undivided and not root and len(undivided) == len(losses):  # no gradient: the losses alone decide
        what = " and ".join(undivided)
        if all(kinds[loss] == "sum" for loss in undivided):
            lines += [f"    # once, after the loop: {what} {'is a sum' if len(undivided) == 1 else 'are sums'} over rows, so "
                      "the devices' sums add up to the batch's: nothing to divide"]
        else:
            lines += [f"    # once, after the loop: divide by {step.devices or 'the device count'} (lax.pmean) only if {what} "
                      f"{'is a mean' if len(undivided) == 1 else 'are means'} over the batch's rows (each",
                      "    # device's is then over its own rows); a sum over rows takes lax.psum alone"]
        lines += [f"    acc = jax.tree.map(lambda a: lax.psum(a, {axis}), acc)"]
        return "\n".join(lines) + "\n"
    losses = [loss for loss in losses if loss not in undivided]
    accumulated = " and ".join((["the gradients"] if root else []) + losses)
    lines += [f"    # once, after the loop: each device's jnp.mean is over its own rows, so {accumulated}",
              f"    # summed over the devices and divided by {step.devices or 'their count'} (lax.pmean) are the batch's; a sum",
              "    # over rows takes lax.psum alone",
              f"    acc = jax.tree.map(lambda a: lax.psum(a, {axis}){divided}, acc)"]
    if undivided:
        lines += [f"    # except {' and '.join(undivided)}: lax.psum alone for a sum over rows (divided only if a mean over them)"]
    return "\n".join(lines) + "\n"


def is_output(value: str) -> bool:
    """True for a value named as one of the program's outputs (``out[1]``): the step computes
    it (a loss), there is nothing to cast."""
    return bool(re.fullmatch(r"out(\[[^\]]+\])*", value.strip()))


def _root(values: Sequence[str]) -> str:
    """The argument the values belong to (``params``), ``params`` when several, "" when none."""
    roots = {m.group() for v in values for m in [re.match(r"[A-Za-z_]\w*", v)] if m}
    if not roots:
        return ""
    return roots.pop() if len(roots) == 1 else "params"
