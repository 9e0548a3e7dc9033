"""The partitioner's warnings of a compile, as shardscope says them: the value, the two layouts
in mesh terms, what the fallback costs and the change that avoids it."""

from __future__ import annotations

from typing import Any, Sequence

from shardscope.engine.hlo.partitioner_warnings import INVOLUNTARY_REMAT, FixCheck, PartitionerWarning
from shardscope.engine.hlo.plan import CompiledCollective


def warning_lines(warning: PartitionerWarning, compiled: Sequence[CompiledCollective] = ()) -> list[str]:
    """The finding's lines: what happened, where, what it costs, the compiled collectives
    (``compiled``, the module's: named as the table names them) and the fix."""
    if warning.kind != INVOLUNTARY_REMAT:
        return [f"partitioner warning: {warning.message}"]
    value = warning.shown_value
    made = f" (made at {warning.value_source})" if warning.value_source else ""
    at = f" at {warning.source}" if warning.source and not warning.value_source else ""
    shape = f"{warning.dtype}[{','.join(str(n) for n in warning.shape)}]"
    lines = [
        f"involuntary full rematerialization of {value}{made}{at}: {warning.source_layout_text()}",
        f"  the partitioner cannot reshard {value} ({shape}, {warning.bytes:,} bytes) efficiently: it gathers "
        f"the whole tensor onto every device and slices it again",
        f"  cost: {warning.moved_bytes:,} bytes moved per device, {warning.bytes:,} bytes of peak memory per device "
        f"(its shard is {warning.shard_bytes:,})",
    ]
    if warning.collectives:
        named = {c.name: c for c in compiled}
        lines.append("  compiled as: " + ", ".join(_collective(named[n]) if n in named else n
                                                    for n in warning.collectives))
    lines.append("  fix: " + _fix_words(warning))
    lines.append("  " + fix_text(warning.fix))
    return lines


def _fix_words(warning: PartitionerWarning) -> str:
    """The change the fix makes, as the user would write it."""
    value, fix = warning.shown_value, warning.fix
    if fix is not None and fix.through:
        specs = (*fix.through, warning.target)
        if not value.isidentifier():  # an operand of its line (jnp.tanh(acts)): wrapped where it is written
            wrapped = value
            for spec in specs:
                wrapped = f"jax.lax.with_sharding_constraint({wrapped}, NamedSharding(mesh, {spec}))"
            where = f" at {warning.value_source}" if warning.value_source else ""
            return (f"reshard {value} in steps the partitioner takes with one all-to-all each, through "
                    f"{', '.join(fix.through)}: write {wrapped} in its place{where}")
        where = f" after {warning.value_source}" if warning.value_source else ""
        steps = ", then ".join(f"{value} = jax.lax.with_sharding_constraint({value}, NamedSharding(mesh, {spec}))"
                               for spec in specs)
        return (f"reshard {value} in steps the partitioner takes with one all-to-all each, through "
                f"{', '.join(fix.through)}{where}: {steps}")
    if fix is not None and fix.input:
        return (f"give {fix.input}, which {value} is computed from, the layout {warning.target} as it comes in "
                f"(in_shardings=, jax.device_put), so {value} is made in it")
    if warning.is_intermediate:  # no argument carries it: constrained where the program computes it
        where = f" at {warning.value_source}" if warning.value_source else " where the program computes it"
        return (f"make {value} in the layout {warning.target}{where} (jax.lax.with_sharding_constraint on it, "
                f"through layouts one all-to-all apart), or give the inputs it is computed from that layout")
    return (f"give {value} the layout {warning.target} where it is made (its sharding as it comes in: "
            f"in_shardings=, jax.device_put; or a jax.lax.with_sharding_constraint on its producer), so both "
            f"sides agree")


def fix_text(fix: FixCheck | None) -> str:
    """What compiling the fix showed."""
    if fix is None:
        return ("fix not compiled here (check compiles it for one of the program's inputs, and for a value made "
                "at one of the program's own lines)")
    if fix.warnings_after < 0:
        return "fix tried: the program with it does not compile"
    kinds = ", ".join(f"{n} {kind}" for kind, n in fix.kinds_after)
    if fix.verified:
        return (f"fix verified: compiled with it, the partitioner does not warn and the collectives carry "
                f"{fix.bytes_after:,} B/call instead of {fix.bytes_before:,}" + (f" ({kinds})" if kinds else ""))
    return (f"fix tried: {fix.warnings_after} rematerialization(s) left, {fix.bytes_after:,} B/call of "
            f"collectives instead of {fix.bytes_before:,}")


def warning_json(warning: PartitionerWarning) -> dict[str, Any]:
    """One finding of ``check --json``'s ``partitioner_findings``."""
    return {"kind": warning.kind, "value": warning.value or warning.op_name or warning.instruction,
            "op_name": warning.op_name, "value_source": warning.value_source, "source": warning.source,
            "from": warning.source_layout, "to": warning.target, "shape": list(warning.shape), "dtype": warning.dtype,
            "bytes": warning.bytes, "shard_bytes": warning.shard_bytes, "moved_bytes_per_device": warning.moved_bytes,
            "peak_bytes_per_device": warning.bytes, "collectives": list(warning.collectives),
            "fix": None if warning.fix is None else {
                "verified": warning.fix.verified, "rematerializations_after": warning.fix.warnings_after,
                "bytes_before": warning.fix.bytes_before, "bytes_after": warning.fix.bytes_after,
                "through": list(warning.fix.through), "input": warning.fix.input,
                "collectives_after": dict(warning.fix.kinds_after)},
            "message": warning.message}


def _collective(c: CompiledCollective) -> str:
    """``all-gather[x] (1,024 B/call)``, as the findings table writes a collective."""
    axes = ",".join(c.axes) if c.axes else "?"
    return f"{c.kind}[{axes}] ({c.bytes_per_execution:,} B/call)"
