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
    value = warning.op_name or f"%{warning.instruction}"
    at = f" at {warning.source}" if warning.source else ""
    shape = f"{warning.dtype}[{','.join(str(n) for n in warning.shape)}]"
    lines = [
        f"involuntary full rematerialization of {value}{at}: {warning.source_layout_text()}",
        f"  the partitioner cannot reshard {value} ({shape}, {warning.bytes:,} bytes) efficiently: it gathers "
        f"the whole tensor onto every device and slices it again",
        f"  cost: {warning.moved_bytes:,} bytes moved per device, {warning.bytes:,} bytes of peak memory per device "
        f"(its shard is {warning.shard_bytes:,})",
    ]
    if warning.collectives:
        named = {c.name: c for c in compiled}
        lines.append("  compiled as: " + ", ".join(_collective(named[n]) if n in named else n
                                                    for n in warning.collectives))
    lines.append(f"  fix: give {value} the layout {warning.target} where it is made (its sharding as it comes in: "
                 f"in_shardings=, jax.device_put; or a jax.lax.with_sharding_constraint on its producer), so both "
                 f"sides agree")
    lines.append("  " + fix_text(warning.fix))
    return lines


def fix_text(fix: FixCheck | None) -> str:
    """What compiling the fix showed."""
    if fix is None:
        return "fix not compiled here (check compiles it when the value is one of the program's inputs)"
    if fix.warnings_after < 0:
        return "fix tried: the program with it does not compile"
    if fix.verified:
        return (f"fix verified: compiled with it, the partitioner does not warn and the collectives carry "
                f"{fix.bytes_after:,} B/call instead of {fix.bytes_before:,}")
    return (f"fix tried: {fix.warnings_after} rematerialization(s) left, {fix.bytes_after:,} B/call of "
            f"collectives instead of {fix.bytes_before:,}")


def warning_json(warning: PartitionerWarning) -> dict[str, Any]:
    """One finding of ``check --json``'s ``partitioner_findings``."""
    return {"kind": warning.kind, "value": warning.op_name or warning.instruction, "source": warning.source,
            "from": warning.source_layout, "to": warning.target, "shape": list(warning.shape), "dtype": warning.dtype,
            "bytes": warning.bytes, "shard_bytes": warning.shard_bytes, "moved_bytes_per_device": warning.moved_bytes,
            "peak_bytes_per_device": warning.bytes, "collectives": list(warning.collectives),
            "fix": None if warning.fix is None else {
                "verified": warning.fix.verified, "rematerializations_after": warning.fix.warnings_after,
                "bytes_before": warning.fix.bytes_before, "bytes_after": warning.fix.bytes_after},
            "message": warning.message}


def _collective(c: CompiledCollective) -> str:
    """``all-gather[x] (1,024 B/call)``, as the findings table writes a collective."""
    axes = ",".join(c.axes) if c.axes else "?"
    return f"{c.kind}[{axes}] ({c.bytes_per_execution:,} B/call)"
