"""The hostile module texts of ``benchmarks/hostile_hlo.py`` and ``tests/test_hlo_fuzz.py``, made from real dumps.

Families: ``controls`` (real modules, which must still read), ``hostile`` (hand-made cases, one way a
text can be broken each, a few still modules XLA could print: :data:`VALID`), ``special files`` (a
FIFO, /dev/zero, a folder where a file should be), ``arguments`` (``estimate_module``'s), ``boundaries``
(a module cut at each computation boundary), ``truncations`` (cut at random points) and ``mutations``
(small random edits: a character flipped, deleted or inserted, a name renamed to another of the
module's, a token dropped, repeated or swapped, a line dropped, repeated or moved, a number broken).
Every generator is seeded: a case is made again from its name and the seed.
"""

from __future__ import annotations

import gzip
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from benchmarks.common import ROOT

CPU_DUMP = ROOT / "tests" / "fixtures" / "xla_dump" / "cpu_jax-0.12.0.1" / "module_0014.jit_step.cpu_after_optimizations.txt"
TPU_DUMP = ROOT / "tests" / "fixtures" / "xla_dump" / "tpu_v5e" / "module_0011.jit_step.cl_933746096.after_optimizations.txt"
DUMP_NAME = "module_0001.jit_step.cpu_after_optimizations.txt"
"""The name each case's text is written under: a dump file's, so the CLI reads it as one."""

FAMILIES = ("controls", "hostile", "special files", "arguments", "boundaries", "truncations", "mutations")


@dataclass(frozen=True)
class Case:
    """One hostile input: its family, its name, and what it is.

    ``text`` is the module text (written to a dump file for the CLI, given as it is to the API);
    ``special`` names a special file the CLI is pointed at instead (no API run); ``chip`` and
    ``argument`` are ``estimate_module``'s arguments for the ``arguments`` family (no CLI run).
    """

    family: str
    name: str
    text: str | None = None
    special: str | None = None
    chip: Any = "v5e"
    argument: Any = None
    base: str = ""
    """The real module a mutation was made from (a control's own name): whose exit status it is compared with."""
    valid: bool = False
    """A hand-made case that is still a module XLA could print (operands written inline 10,000 deep, a
    20 MB name): it must give a plan, as a control does."""


def base_texts() -> dict[str, str]:
    """The real modules the cases are made from."""
    return {"cpu": CPU_DUMP.read_text(), "tpu": TPU_DUMP.read_text()}


def _entry_start(text: str) -> int:
    """Where the first line of the ENTRY computation's body starts."""
    header = text.index("\nENTRY ") + 1
    return text.index("\n", header) + 1


def _in_entry(text: str, *lines: str) -> str:
    """``text`` with ``lines`` added at the start of its ENTRY computation's body."""
    at = _entry_start(text)
    return text[:at] + "".join(f"  {line}\n" for line in lines) + text[at:]


def _replace_once(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def _while_line(text: str) -> str:
    return next(line for line in text.splitlines() if " while(" in line)


def hostile_cases(base: str) -> list[Case]:
    """The hand-made cases, from the CPU dump's module ``base``."""
    cases: list[tuple[str, str]] = []
    add = cases.append
    digits = "9" * 5000
    # deep nesting
    for depth in (1_000, 10_000, 100_000):
        add((f"tuple shape {depth:,} deep", _in_entry(base, f"%deep = {'(' * depth}f32[]{')' * depth} parameter(9)")))
        inline = "f32[] negate(" * depth + "f32[] constant(1)" + ")" * depth
        add((f"inline operands {depth:,} deep", _in_entry(base, f"%deep = f32[] negate({inline})")))
        add((f"#-chain {depth:,} long", _in_entry(base, f"%deep = f32[] negate(%param.5{'#0' * depth})")))
        add((f"backend_config JSON {depth:,} deep", _replace_once(
            base, '"known_trip_count":{"n":"4"}', '"known_trip_count":{"n":"4"},"x":' + "[" * depth + "]" * depth)))
        add((f"metadata braces {depth:,} deep", _in_entry(base, "%deep = f32[] constant(0), metadata={" + "{" * depth)))
    add(("30,000 unclosed parentheses", _in_entry(base, "%bad = f32[] add(" + "(" * 30_000)))
    add(("30,000 unclosed parentheses, one a line", _in_entry(base, *(["%bad = f32[] add("] + ["("] * 30_000))))
    add(("30,000 closing parentheses", _in_entry(base, "%bad = f32[] constant(0)" + ")" * 30_000)))
    # long lines and strings
    escaped = '\\"' * 100_000
    add(("200 KB quoted string of escapes", _in_entry(base, f'%s = f32[] constant(0), metadata={{op_name="{escaped}"}}')))
    add(("200 KB unclosed quoted string", _in_entry(base, f'%s = f32[] constant(0), metadata={{op_name="{escaped}')))
    add(("200 KB of quotes", _in_entry(base, "%s = f32[] constant(0), metadata={op_name=" + '"' * 200_001 + "}")))
    add(("20 MB line inside ENTRY", _in_entry(base, "%long = f32[] constant(0), metadata={op_name=\"" + "a" * 20_000_000 + "\"}")))
    add(("20 MB of letters inside ENTRY", _in_entry(base, "a" * 20_000_000)))
    add(("20 MB of brackets inside ENTRY", _in_entry(base, "([{" * 7_000_000)))
    add(("20 MB of % names", _in_entry(base, "%a = f32[] add(" + "%x, " * 5_000_000 + ")")))
    # duplicate names and sizes
    add(("60,000 duplicate instruction names", _in_entry(base, *["%dup = f32[] constant(0)"] * 60_000)))
    add(("60,000 duplicate names across computations", base.replace(
        "\nENTRY ", "\n" + "".join(f"%c{k} {{\n  ROOT %dup = f32[] constant(0)\n}}\n" for k in range(60_000)) + "\nENTRY ", 1)))
    add(("duplicate computation", base.replace("\nENTRY ", "\n%region_1.0 {\n  ROOT %z = f32[] constant(0)\n}\n\nENTRY ", 1)))
    # numbers
    for shape in ("f32[8,x]", "f32[-1]", "f32[,]", "f32[8,,8]", "q99[8]", f"f32[{digits}]", "f32[1e18]",
                  "f32[18446744073709551616]", "f32[99999999999,99999999999]", "f32[8", "f32]8[", "[8]", "f32[<=x]"):
        add((f"shape {shape[:24]}", _in_entry(base, f"%bad = {shape} parameter(9)")))
        add((f"operand shape {shape[:24]}", _replace_once(base, "%copy.10 = s32[] copy(", f"%copy.10 = {shape} copy(")))
    while_line = _while_line(base)
    for n in ('"abc"', '"1e18"', "null", "[]", "NaN", "Infinity", '"-1"', '"0"', f'"{digits}"', "1.5",
              '"99999999999999999999"', '{"n":"4"}', '""', "-4", "true"):
        add((f"trip count n={n[:20]}", base.replace(while_line, while_line.replace('"known_trip_count":{"n":"4"}',
                                                                                '"known_trip_count":{"n":' + n + "}"))))
    add(("trip count not an object", base.replace(while_line, while_line.replace('"known_trip_count":{"n":"4"}',
                                                                              '"known_trip_count":"4"'))))
    for groups in ("{{0,x}}", "[8,1]<=[abc]", "[3000000000,1]<=[3000000000]", "[2,2]<=[3]", "[4,2]<=[2,4]T(5,0)",
                   "[4,2]<=[2,4]T(0,0)", "mesh['data'=3000000000] {'data'}", "mesh['data'=x] {'data'}",
                   "mesh['data'=8] {'nope'}", "mesh['data'=8], device_ids=(0,1) {'data'}", "{{0,1},{",
                   "{{" + digits + "}}", "[" + digits + "]<=[8]", "mesh[", "[]<=[]", "{{-1,0}}",
                   "mesh['data'=8], device_ids=([3000000000]) {'data'}", "[65536,65536]<=[4294967296]"):
        add((f"replica_groups={groups[:28]}", base.replace("replica_groups=mesh['data'=8] {'data'}",
                                                           f"replica_groups={groups}", 1)))
    for old, new in (("channel_id=1,", "channel_id=abc,"), ("channel_id=1,", f"channel_id={digits},"),
                     ("parameter(0), metadata={op_name=\"w\"}", "parameter(abc)"),
                     ("parameter(0), metadata={op_name=\"w\"}", f"parameter({digits})"),
                     ("parameter(0), metadata={op_name=\"w\"}", "parameter(-1)"),
                     ("parameter(0), metadata={op_name=\"w\"}", "parameter(7)"),
                     ("num_partitions=8", f"num_partitions={digits}"), ("num_partitions=8", "num_partitions=abc"),
                     ("num_partitions=8", "num_partitions=0"), ("stack_frame_id=3}", f"stack_frame_id={digits}}}"),
                     ("stack_frame_id=3}", "stack_frame_id=999999}"), ("stack_frame_id=3}", "stack_frame_id=-1}"),
                     ("line=57 ", f"line={digits} "), ("1 {file_location_id=1 parent_frame_id=1}",
                                                        "1 {file_location_id=1 parent_frame_id=3}"),
                     ("2 {file_location_id=2 parent_frame_id=2}", f"2 {{file_location_id={digits} parent_frame_id=2}}"),
                     ("dimensions={}", "dimensions={a,b}"), ("dimensions={}", f"dimensions={{{digits}}}"),
                     ("dynamic_slice_sizes={1,8,8}", "dynamic_slice_sizes={x}"),
                     ("direction=LT", "direction=SIDEWAYS")):
        add((f"{old.split('=')[0].split('(')[0][:16]} -> {new[:24]}", _replace_once(base, old, new)))
    # structure
    entry_mark = "\nENTRY %main.0_spmd"
    add(("no ENTRY mark", _replace_once(base, entry_mark, "\n%main.0_spmd")))
    add(("two ENTRY computations", base.replace("\n%region_1.0 (", "\nENTRY %region_1.0 (", 1)))
    body = re.search(r"body=(%[\w.\-]+)", while_line).group(0)  # type: ignore[union-attr]
    condition = re.search(r"condition=(%[\w.\-]+)", while_line).group(0)  # type: ignore[union-attr]
    add(("while without body", base.replace(while_line, while_line.replace(body + ",", "").replace(body, ""))))
    add(("while without condition", base.replace(while_line, while_line.replace(condition + ",", "").replace(condition, ""))))
    add(("while body missing", base.replace(while_line, while_line.replace(body, "body=%nowhere"))))
    add(("while body is ENTRY", base.replace(while_line, while_line.replace(body, "body=%main.0_spmd"))))
    body_name = body.split("%", 1)[1]
    add(("while body calls itself", _self_calling_body(base, body_name)))
    add(("call cycle of two computations", _call_cycle(base)))
    add(("fusion calls a missing computation", _replace_once(base, "calls=%fused_computation.3", "calls=%missing")))
    add(("all-reduce to_apply missing", _replace_once(base, "to_apply=%region_1.0", "to_apply=%missing")))
    add(("diamond of 40 calls", _diamond(base, 40, collective=False)))
    add(("diamond of 40 calls around an all-reduce", _diamond(base, 40, collective=True)))
    add(("diamond of 40 while loops", _diamond(base, 40, collective=True, loops=True)))
    add(("call chain 10,000 deep", _chain(base, 10_000)))
    add(("operand undefined", _replace_once(base, "copy(%constant.5.clone.1)", "copy(%nowhere)")))
    add(("operand from another computation", _replace_once(base, "copy(%constant.5.clone.1)", "copy(%param_0.3)")))
    add(("operand cycle", _in_entry(base, "%cy.a = s32[] copy(%cy.b)", "%cy.b = s32[] copy(%cy.a)")))
    add(("operand is itself", _in_entry(base, "%cy.a = s32[] negate(%cy.a)")))
    add(("unknown opcode", _replace_once(base, " copy(%constant.5.clone.1)", " frobnicate(%constant.5.clone.1)")))
    add(("unknown opcode on the all-reduce", _replace_once(base, "all-reduce(%dot.3)", "all-reduce-ish(%dot.3)")))
    add(("two ROOTs", _in_entry(base, "ROOT %r0 = f32[] constant(0)")))
    add(("empty computation", base.replace("\nENTRY ", "\n%empty {\n}\n\nENTRY ", 1)))
    add(("junk line in ENTRY", _in_entry(base, "this is not an instruction")))
    add(("instruction outside computations", base.replace("\nENTRY ", "\n%x = f32[] constant(0)\nENTRY ", 1)))
    add(("unbalanced parenthesis", _replace_once(base, "copy(%constant.5.clone.1)", "copy((%constant.5.clone.1)")))
    add(("missing parenthesis", _replace_once(base, "copy(%constant.5.clone.1)", "copy(%constant.5.clone.1")))
    add(("missing closing brace of ENTRY", base.rstrip().removesuffix("}")))
    add(("extra closing brace", base.replace("\nENTRY ", "\n}\nENTRY ", 1)))
    add(("NUL byte in ENTRY", _in_entry(base, "%n = f32[] constant(0)\x00")))
    add(("NUL byte in a name", _replace_once(base, "%copy.10 = ", "%copy\x00.10 = ")))
    add(("NUL bytes everywhere", base.replace("%", "\x00%")))
    add(("empty text", ""))
    add(("whitespace", " \n\t\n" * 1000))
    add(("header alone", base[: base.index("\n")]))
    add(("tables alone", base[: base.index("\n%region_1.0")]))
    rng = random.Random(11)
    add(("200 KB of random characters", "".join(chr(rng.randrange(1, 0x3000)) for _ in range(200_000))))
    add(("200 KB of random printable ASCII", "".join(chr(rng.randrange(32, 127)) for _ in range(200_000))))
    add(("200 KB of random bytes (latin-1)", bytes(rng.randrange(256) for _ in range(200_000)).decode("latin-1")))
    add(("Python source", (ROOT / "shardscope" / "engine" / "hlo" / "text.py").read_text()))
    add(("JSON", '{"a": [1, 2, 3]}\n' * 1000))
    add(("the module twice", base + "\n" + base))
    return [Case("hostile", name, text, valid=name.startswith(VALID)) for name, text in cases]


VALID = ("inline operands", "200 KB quoted string of escapes", "200 KB of quotes", "20 MB line inside ENTRY",
         "60,000 duplicate names across computations", "1 {file_location")
"""The hand-made cases that are still modules (XLA's parser reads them): a plan is their right outcome."""


def _self_calling_body(base: str, body_name: str) -> str:
    """The while body's ROOT replaced by a call of the body itself."""
    start = base.index(f"\n%{body_name} (") + 1
    end = base.index("\n}", start)
    root = base.rindex("\n  ROOT ", start, end) + 1
    line_end = base.index("\n", root)
    name, rest = base[root:line_end].split(" = ", 1)
    shape = rest.split(" tuple(", 1)[0]
    param = re.search(r"%(param[\w.]*) = ", base[start:end]).group(1)  # type: ignore[union-attr]
    return base[:root] + f"{name} = {shape} call(%{param}), to_apply=%{body_name}" + base[line_end:]


def _call_cycle(base: str) -> str:
    """Two computations that call each other, called from ENTRY."""
    extra = ("%ping (p: f32[]) -> f32[] {\n  %p = f32[] parameter(0)\n  ROOT %c = f32[] call(%p), to_apply=%pong\n}\n\n"
             "%pong (q: f32[]) -> f32[] {\n  %q = f32[] parameter(0)\n  ROOT %d = f32[] call(%q), to_apply=%ping\n}\n\n")
    text = base.replace("\nENTRY ", "\n" + extra + "ENTRY ", 1)
    return _in_entry(text, "%z = f32[] constant(0)", "%pinged = f32[] call(%z), to_apply=%ping")


def _diamond(base: str, levels: int, collective: bool, loops: bool = False) -> str:
    """A computation ``levels`` deep in which each level calls the next twice (2**levels paths)."""
    root = ("%ar = f32[8]{0} all-reduce(%p), channel_id=9, replica_groups={{0,1,2,3,4,5,6,7}}, to_apply=%region_1.0"
            if collective else "%n = f32[8]{0} negate(%p)")
    parts = [f"%level{levels} (p: f32[8]) -> f32[8] {{\n  %p = f32[8]{{0}} parameter(0)\n  ROOT {root}\n}}\n\n"]
    for k in range(levels - 1, -1, -1):
        if loops:
            parts.append(
                f"%cond{k} (c: (s32[], f32[8])) -> pred[] {{\n  %c = (s32[], f32[8]{{0}}) parameter(0)\n"
                f"  %i = s32[] get-tuple-element(%c), index=0\n  %n = s32[] constant(2)\n"
                f"  ROOT %lt = pred[] compare(%i, %n), direction=LT\n}}\n\n"
                f"%body{k} (b: (s32[], f32[8])) -> (s32[], f32[8]) {{\n  %b = (s32[], f32[8]{{0}}) parameter(0)\n"
                f"  %i = s32[] get-tuple-element(%b), index=0\n  %one = s32[] constant(1)\n"
                f"  %j = s32[] add(%i, %one)\n  %v = f32[8]{{0}} get-tuple-element(%b), index=1\n"
                f"  %w = f32[8]{{0}} call(%v), to_apply=%level{k + 1}\n"
                f"  ROOT %t = (s32[], f32[8]{{0}}) tuple(%j, %w)\n}}\n\n"
                f"%level{k} (p: f32[8]) -> f32[8] {{\n  %p = f32[8]{{0}} parameter(0)\n  %zero = s32[] constant(0)\n"
                f"  %t0 = (s32[], f32[8]{{0}}) tuple(%zero, %p)\n"
                f"  %wa = (s32[], f32[8]{{0}}) while(%t0), condition=%cond{k}, body=%body{k}\n"
                f"  %wb = (s32[], f32[8]{{0}}) while(%t0), condition=%cond{k}, body=%body{k}\n"
                f"  %a = f32[8]{{0}} get-tuple-element(%wa), index=1\n  %b = f32[8]{{0}} get-tuple-element(%wb), index=1\n"
                f"  ROOT %s = f32[8]{{0}} add(%a, %b)\n}}\n\n")
        else:
            parts.append(f"%level{k} (p: f32[8]) -> f32[8] {{\n  %p = f32[8]{{0}} parameter(0)\n"
                         f"  %a = f32[8]{{0}} call(%p), to_apply=%level{k + 1}\n"
                         f"  %b = f32[8]{{0}} call(%p), to_apply=%level{k + 1}\n  ROOT %s = f32[8]{{0}} add(%a, %b)\n}}\n\n")
    text = base.replace("\nENTRY ", "\n" + "".join(parts) + "ENTRY ", 1)
    return _in_entry(text, "%dz = f32[8]{0} constant({0,0,0,0,0,0,0,0})", "%dcall = f32[8]{0} call(%dz), to_apply=%level0")


def _chain(base: str, depth: int) -> str:
    """Computations calling one another ``depth`` deep."""
    parts = [f"%link{depth} (p: f32[]) -> f32[] {{\n  ROOT %p = f32[] parameter(0)\n}}\n\n"]
    for k in range(depth - 1, -1, -1):
        parts.append(f"%link{k} (p: f32[]) -> f32[] {{\n  %p = f32[] parameter(0)\n"
                     f"  ROOT %c = f32[] call(%p), to_apply=%link{k + 1}\n}}\n\n")
    text = base.replace("\nENTRY ", "\n" + "".join(parts) + "ENTRY ", 1)
    return _in_entry(text, "%cz = f32[] constant(0)", "%cc = f32[] call(%cz), to_apply=%link0")


def special_cases() -> list[Case]:
    """Paths that are not regular files (made by :func:`make_special` in the worker's folder)."""
    names = ("fifo as the file", "fifo in the folder", "/dev/zero", "symlink to /dev/zero",
             "symlink to /dev/zero in the folder", "/dev/null", "a folder named like a module",
             "a 3 GiB sparse file", "a file that cannot be read", "/dev/urandom")
    return [Case("special files", name, special=name) for name in names]


def argument_cases(base: str) -> list[Case]:
    """``estimate_module``'s arguments: chips that are paths or not names, texts that are not text."""
    chips: list[Any] = ["/any/path", "../gpu_descriptions/h100", "x" * 256, None, 5, b"v5e", "", "gpu_descriptions/h100",
                        str(ROOT / "shardscope" / "gpu_descriptions" / "h100"), "v5e\x00", "h100/../h100", 3.5, ["v5e"]]
    cases = [Case("arguments", f"chip={chip!r}"[:40], argument=base, chip=chip) for chip in chips]
    for text in (None, base.encode(), 5, ["line"], Path(CPU_DUMP)):
        cases.append(Case("arguments", f"text={type(text).__name__}", argument=text))
    return cases


def boundary_cases(name: str, base: str) -> list[Case]:
    """``base`` cut after each computation, before each header, inside each header (and after it)."""
    cases = []
    for match in re.finditer(r"^(ENTRY )?%[\w.\-]+ .*\{$", base, re.M):
        start, end = match.start(), match.end()
        label = match.group(0).split(" (", 1)[0][:40]
        cases.append(Case("boundaries", f"{name}: before {label}", base[:start]))
        cases.append(Case("boundaries", f"{name}: inside the header of {label}", base[: (start + end) // 2]))
        cases.append(Case("boundaries", f"{name}: after the header of {label}", base[: end + 1]))
    for match in re.finditer(r"^\}$", base, re.M):
        if base[match.end():].strip():
            cases.append(Case("boundaries", f"{name}: after the computation ending at {match.start()}", base[: match.end() + 1]))
    return cases


def truncation_cases(name: str, base: str, count: int, seed: int) -> list[Case]:
    """``base`` cut at ``count`` random points (each leaves something of the module out)."""
    rng = random.Random(seed)
    last = len(base.rstrip())
    return [Case("truncations", f"{name}: cut at {cut}", base[:cut]) for cut in sorted(rng.randrange(1, last) for _ in range(count))]


_TOKEN = re.compile(r"%?[\w.\-#]+|\S")
_BROKEN_NUMBERS = ("-1", "0", "abc", "1e18", "", "9" * 5000, "99999999999999999999", "3000000000", "-0", "0x10")


def mutation(base: str, rng: random.Random) -> tuple[str, str]:
    """One small random edit of ``base``: ``(what was done, the text)``."""
    kind = rng.choice(("flip", "delete", "insert", "rename", "drop token", "repeat token", "drop line",
                       "repeat line", "move line", "number", "swap tokens"))
    at = rng.randrange(len(base))
    if kind == "flip":
        return kind, base[:at] + rng.choice('(){}[],=%#"\\ \n\x00az09.-_<>:;\'') + base[at + 1:]
    if kind == "delete":
        return kind, base[:at] + base[at + rng.randint(1, 20):]
    if kind == "insert":
        return kind, base[:at] + "".join(rng.choice('(){}[],=%#"\\ az09') for _ in range(rng.randint(1, 8))) + base[at:]
    if kind in ("drop line", "repeat line", "move line"):
        lines = base.split("\n")
        k = rng.randrange(len(lines))
        if kind == "drop line":
            del lines[k]
        elif kind == "repeat line":
            lines.insert(k, lines[k])
        else:
            lines.insert(rng.randrange(len(lines)), lines.pop(k))
        return kind, "\n".join(lines)
    tokens = list(_TOKEN.finditer(base))
    token = tokens[rng.randrange(len(tokens))]
    if kind == "number":
        numbers = [t for t in tokens if t.group().isdigit()]
        token = numbers[rng.randrange(len(numbers))]
        return kind, base[: token.start()] + rng.choice(_BROKEN_NUMBERS) + base[token.end():]
    if kind == "rename":
        names = [t for t in tokens if t.group().startswith("%")]
        token, other = names[rng.randrange(len(names))], names[rng.randrange(len(names))]
        return kind, base[: token.start()] + other.group() + base[token.end():]
    if kind == "drop token":
        return kind, base[: token.start()] + base[token.end():]
    if kind == "repeat token":
        return kind, base[: token.end()] + " " + token.group() + base[token.end():]
    other = tokens[rng.randrange(len(tokens))]
    first, second = sorted((token, other), key=lambda t: t.start())
    if first.end() > second.start():
        return kind, base
    return kind, (base[: first.start()] + second.group() + base[first.end(): second.start()] + first.group()
                  + base[second.end():])


def mutation_cases(bases: dict[str, str], count: int, seed: int) -> Iterator[Case]:
    """``count`` mutations of the bases in turn."""
    rng = random.Random(seed)
    names = sorted(bases)
    for k in range(count):
        name = names[k % len(names)]
        kind, text = mutation(bases[name], rng)
        yield Case("mutations", f"{name}: {kind} #{k}", text, base=name)


def control_cases(bases: dict[str, str]) -> list[Case]:
    """Real modules, which must still give a plan and an estimate: the two dumps (named as the
    mutations' bases), XLA's 65 WhileLoopAllReduceCodeMotion test modules and the stored modules
    of the test fixtures."""
    cases = [Case("controls", name, text, base=name) for name, text in sorted(bases.items())]
    fixtures = ROOT / "tests" / "fixtures"
    paths = sorted([*fixtures.glob("xla_ar_code_motion/*.hlo"), *fixtures.glob("code_motion/*.hlo"),
                    *fixtures.glob("hlo/*/*.txt"), *fixtures.glob("tpu/*/*.txt"), *fixtures.glob("tpu/*/*.txt.gz")])
    for path in paths:
        data = path.read_bytes()
        text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode()
        cases.append(Case("controls", str(path.relative_to(fixtures)), text))
    return cases


def every_case(grid: dict[str, Any], seed: int = 0, families: tuple[str, ...] = FAMILIES) -> Iterator[Case]:
    """The cases of one run, family after family (those of ``families``)."""
    bases = base_texts()
    if "controls" in families:
        controls = control_cases(bases)
        yield from controls[: grid.get("controls", len(controls))]
    if "hostile" in families:
        hostile = hostile_cases(bases["cpu"])
        yield from hostile[: grid.get("hostile", len(hostile))]
    if "special files" in families:
        yield from special_cases()
    if "arguments" in families:
        yield from argument_cases(bases["cpu"])
    if "boundaries" in families:
        for name, text in bases.items():
            boundaries = boundary_cases(name, text)
            yield from boundaries[: grid.get("boundaries", len(boundaries))]
    if "truncations" in families:
        for k, (name, text) in enumerate(sorted(bases.items())):
            yield from truncation_cases(name, text, grid["truncations"] // len(bases), seed + k)
    if "mutations" in families:
        yield from mutation_cases(bases, grid["mutations"], seed)


def make_special(name: str, folder: Path) -> Path:
    """The special file ``name`` (:func:`special_cases`) in ``folder``; its path."""
    inner = folder / "dump"
    inner.mkdir()
    target = inner / DUMP_NAME
    if name == "fifo as the file":
        os.mkfifo(target)
        return target
    if name == "fifo in the folder":
        os.mkfifo(target)
        return inner
    if name == "symlink to /dev/zero":
        target.symlink_to("/dev/zero")
        return target
    if name == "symlink to /dev/zero in the folder":
        target.symlink_to("/dev/zero")
        return inner
    if name == "a folder named like a module":
        target.mkdir()
        return target
    if name == "a 3 GiB sparse file":
        with open(target, "wb") as out:
            out.truncate(3 * 2**30)
        return target
    if name == "a file that cannot be read":  # as root, it can: then it is a module like any other
        target.write_text(CPU_DUMP.read_text())
        target.chmod(0)
        return target
    return Path(name)
