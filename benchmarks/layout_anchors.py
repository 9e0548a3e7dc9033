"""``shardscope layouts`` against published layouts: MaxText's tuned v5e-256 table and NVIDIA's GPT-3
175B on H100s.

``python -m benchmarks.layout_anchors --case llama2_7b [--bare] [--cache DIR]`` runs the command
(``shardscope layouts FILE -f FUNCTION --target ... --json``) in a process of its own, cold unless
``--cache`` names a compilation cache to read (then a re-ranking of compiles made before), with
``--workers N`` worker processes (default: the case's, two), and
writes ``benchmarks/results/layout_anchors_<case>.json``: the ranking, the command's wall and CPU
time with the machine's load, and with ``--bare`` JAX's own ahead-of-time compile of the same
candidates (``benchmarks/bare_layouts.py``), the budget the sweep is held to. Run alone (hours on
a loaded 2-core machine); ``--smoke`` ranks a toy model's one candidate on ``tpu:v5e:2x4``.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.common import commit, grid, parse_args, python, results_dir, run_child, write_result
from benchmarks.harness import Benchmark, Column, Each, Prose, SummaryRow, Table
from shardscope.engine.hlo.roofline import seconds_words
from shardscope.render.measured import plural

V5E_FLOPS, V5E_ICI_AXIS_BPS = 1.97e14, 2 * 4.5e10
"""v5e's bf16 peak and one ICI axis's bidirectional bandwidth (the scaling book's C and W_ici)."""
SCALING_BOOK = "https://jax-ml.github.io/scaling-book/training/"
TOKENS = 2048
WITHIN = 1.10
"""The published layout must be the pick, or within 10% of the pick's estimated step (per token)."""
FIT = "peak"
"""How the sweep judged a TPU candidate's fit, recorded in each result: ``peak``, libtpu's
``peak_memory_in_bytes`` (``shardscope/hardware/fit.py``, since ab605fb). A result without it was
judged by arguments + outputs + temporaries - aliases, which overstates a scanned step on a TPU
(Llama-2 70B over fsdp=256: 19.53 GiB by the sum, 14.07 by the peak): :func:`rejudged` reads it again."""

ESTIMATES = (
    ("", "8cec68c", "counted the buffers of XLA:TPU's async collective fusions as the fusions' memory traffic and "
                    "every collective-permute of a collective matmul loop as exposed; both made tensor-parallel "
                    "candidates slower than the compiled step runs them"),
    ("collective matmul", "5ad8e14", "read the steps of an async collective fusion that run in a loop nested in the "
                                     "collective's own (an all-gather started before the attention's loop and stepped "
                                     "by its fusions) as a second collective of the inner loop, run once per inner "
                                     "trip, and counted none of a stepped collective's time as overlapped with its "
                                     "steps' work"),
    ("async collective fusion steps", "35fb2bd", "counted the elements an all-gather inside an async collective "
                                                 "fusion moves as vector work of the fusion (on the 128B dumps, "
                                                 "a fraction of a percent of the step's upper end)"),
    ("moved bytes no flops", "b906b05", "charged a fusion that pads an operand and slices one chunk of it (each step "
                                        "of a collective matmul loop) the whole operand's bytes (on the 128B dumps over "
                                        "fsdp=16 x tensor=16, 7.06 of 5.74 TB a step)"),
    ("sliced chunks", "ecc1377", "added a collective stepped in a collective matmul loop to the loop's permutes where "
                                 "the two use no link in common (an FSDP all-gather beside permutes over tensor, on "
                                 "the other torus axis: on GPT-3 175B's dump over fsdp=16 x tensor=16, 3% of its "
                                 "collectives' time and 1% of its exposed step)"),
)
"""Each estimate a sweep may have recorded (its ``estimate`` key; none before 8cec68c), the commit
that changed it and what it did until then: :func:`_case_prose` says what a result's estimate
lacks."""

ESTIMATE = "links of their own"
"""Today's estimate of XLA:TPU's collective matmuls and async collective fusions, recorded in each
result: a loop's collective-permutes overlapped with its own matmul chunks and the two ways round
the ring at once; a fusion's collective buffers left to the collective; an async collective fusion's
steps, wherever they run, steps of one collective whose time overlaps their work; a collective that
only moves data computes nothing; a fusion that pads an operand and slices it reads the chunks it keeps;
collectives of one loop that use no link in common run at once."""


@dataclass(frozen=True)
class Case:
    """One sweep: the layouts function, the target, the candidates tried and what was published."""

    file: str
    function: str
    target: str
    axes: tuple[str, ...]
    options: tuple[str, ...]
    published: dict[str, int]
    source: str
    workers: int = 2
    fsdp_analysis: bool = True
    notes: tuple[str, ...] = field(default=())
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables the command runs with (written before it in the result's command)."""


MAXTEXT = "MaxText's `benchmarks/maxtext_v5e_model_configs.py` (AI-Hypercomputer/maxtext)"
NVIDIA = "NVIDIA's MLPerf Training v3.1 GPT-3 175B on DGX H100 (`config_DGXH100_*x8x*x4x8_mbs1.sh`: TP 4, PP 8)"
CASES = {
    "llama2_7b": Case("benchmarks/maxtext_v5e_layouts.py", "llama2_7b", "tpu:v5e:16x16",
                      ("data=1", "tensor=1,2,4,8,16"), ("per_device_batch=4",), {"fsdp": 256}, MAXTEXT),
    "llama2_70b": Case("benchmarks/maxtext_v5e_layouts.py", "llama2_70b", "tpu:v5e:16x16",
                       ("data=1", "tensor=1,2,4,8,16"), ("per_device_batch=2",), {"fsdp": 256}, MAXTEXT),
    "gpt3_175b": Case("benchmarks/maxtext_v5e_layouts.py", "gpt3_175b", "tpu:v5e:16x16",
                      ("data=1", "tensor=1,2,4,8,16"), ("per_device_batch=0.5",), {"fsdp": 16, "tensor": 16}, MAXTEXT),
    "default_128b": Case("benchmarks/maxtext_v5e_layouts.py", "default_128b", "tpu:v5e:16x16",
                         ("data=1", "tensor=1,2,4,8,16"), ("per_device_batch=1",), {"fsdp": 16, "tensor": 16}, MAXTEXT),
    "gpt3_175b_h100_4x8": Case("benchmarks/gpu_gpt3_layouts.py", "gpt3_175b", "gpu:h100:4x8",
                               ("data=1", "tensor=1,2,4,8", "pipeline=1,2,4,8"),
                               ("per_device_batch=1", "microbatches=8"), {"tensor": 4, "pipeline": 8}, NVIDIA,
                               fsdp_analysis=False),
    "gpt3_175b_h100_8x8": Case("benchmarks/gpu_gpt3_layouts.py", "gpt3_175b", "gpu:h100:8x8",
                               ("data=1", "tensor=4,8", "pipeline=2,4,8"),
                               ("per_device_batch=1", "microbatches=16"), {"fsdp": 2, "tensor": 4, "pipeline": 8},
                               NVIDIA, fsdp_analysis=False),
}
CASES["gpt3_175b_h100_8x8_mem95"] = replace(CASES["gpt3_175b_h100_8x8"], env=(("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95"),))
"""The same sweep where each JAX process may use 95% of a GPU's memory (JAX's default is 75%)."""
SMOKE = Case("benchmarks/maxtext_v5e_layouts.py", "tiny", "tpu:v5e:2x4", ("data=1", "tensor=1"),
             ("per_device_batch=2",), {"fsdp": 8}, "a toy model (smoke)", workers=1)
"""The smallest sweep: one candidate (the published one), compiled in the command's own process, and
JAX's own compile of it (worker processes and rankings of several candidates: ``tests/test_layouts.py``)."""


def command(case: Case) -> list[str]:
    """The ``shardscope layouts`` command line of ``case``."""
    words = [python(), "-m", "shardscope", "layouts", case.file, "-f", case.function, "--target", case.target,
             "--json", "--workers", str(case.workers)]
    for axis in case.axes:
        words += ["--axis", axis]
    for option in case.options:
        words += ["--option", option]
    return words


def run_case(name: str, case: Case, cache: str | None, bare: bool) -> dict[str, Any]:
    """Run the sweep (and JAX's own compiles of its candidates, with ``bare``). Without ``cache``
    the sweep fills a fresh folder, removed once it is done (each was about 45 MB): the result
    then names no cache."""
    if cache is None:
        with tempfile.TemporaryDirectory(prefix="layouts-cache-") as fresh:
            return {**_run_case(name, case, fresh, bare), "cache": None}
    return _run_case(name, case, cache, bare)


def _run_case(name: str, case: Case, directory: str, bare: bool) -> dict[str, Any]:
    cold = not any(entry.name.startswith("shardscope-target-") for entry in os.scandir(directory))
    load = os.getloadavg()[0]
    ran = run_child(command(case), env={"SHARDSCOPE_NO_CACHE": "", "JAX_COMPILATION_CACHE_DIR": directory, **dict(case.env)},
                    timeout=12 * 3600)
    if ran["returncode"] not in (0, 1):
        raise RuntimeError(f"{' '.join(command(case))} failed:\n{ran['stderr'][-3000:]}")
    ranking = json.loads(ran["stdout"])
    result = {"case": name, "command": " ".join(command(case)[3:]), "env": dict(case.env), "target": case.target, "fit": FIT,
              "estimate": ESTIMATE,
              "published": case.published, "source": case.source, "fsdp_analysis": case.fsdp_analysis,
              "cold": cold, "cache": directory, "load_average_at_start": load, "load_average_at_end": os.getloadavg()[0],
              "sweep": {key: ran[key] for key in ("wall_s", "user_s", "sys_s", "max_rss_mib")}, "ranking": ranking}
    if bare:
        result["bare"] = bare_compiles(case, ranking)
    return result


def bare_compiles(case: Case, ranking: dict[str, Any]) -> dict[str, Any]:
    """JAX's own compile of every candidate the sweep compiled, in one process of its own."""
    compiled = [row["candidate"] for row in ranking["rows"] if row["outcome"] not in ("failed", "cut")]
    if not compiled:
        return {"candidates": [], "wall_s": 0.0, "user_s": 0.0}
    options = [f"--option={name}={value}" for name, value in compiled[0]["options"].items()]
    meshes = [",".join(f"{axis}={size}" for axis, size in c["mesh"].items()) for c in compiled]
    ran = run_child([python(), "-m", "benchmarks.bare_layouts", case.file, case.function,
                     case.target.removeprefix("tpu:"), *meshes, *options], timeout=12 * 3600)
    lines = [json.loads(line) for line in ran["stdout"].splitlines() if line.startswith("{")]
    return {"candidates": lines, "wall_s": ran["wall_s"], "user_s": ran["user_s"], "sys_s": ran["sys_s"],
            "max_rss_mib": ran["max_rss_mib"], "returncode": ran["returncode"]}


def main(argv: list[str] | None = None) -> None:
    """Run one case (``--case``) and write its result (``--cycles``: add XLA's cycles to it)."""
    def own(parser: Any) -> None:  # argparse's parser
        parser.add_argument("--case", choices=sorted(CASES), default="llama2_7b")
        parser.add_argument("--cache", help="a compilation cache folder to read and fill (default: a fresh one)")
        parser.add_argument("--bare", action="store_true", help="also JAX's own compile of each candidate")
        parser.add_argument("--workers", type=int, help="the sweep's worker processes (default: the case's)")
        parser.add_argument("--cycles", action="store_true",
                            help="compile the stored result's pick and published layout again and add XLA's cycles")

    args = parse_args(__doc__.splitlines()[0], argv, own)
    name = grid(args, args.case, args.case, "smoke")
    case = SMOKE if args.mode == "smoke" else CASES[name]
    if args.workers:
        case = replace(case, workers=args.workers)
    if args.cycles:
        path = args.out or results_dir(args.mode) / f"layout_anchors_{name}.json"
        result = json.loads(path.read_text())
        result["cycles"] = cycles(case, result)
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(f"added XLA's cycles to {path}")
        return
    result = run_case(name, case, args.cache, args.bare or args.mode == "smoke")
    path = write_result(f"layout_anchors_{name}", args, result)
    print(f"wrote {path}: {result['ranking']['why']}")


def cycles(case: Case, result: dict[str, Any]) -> dict[str, Any]:
    """The result's pick and published layout compiled again for its target, in this process, and
    each one's compute and memory timed two ways (:func:`benchmarks.tpu_corpus_report.module_cycles`):
    shardscope's roofline and XLA:TPU's own ``estimated_cycles``, per token. A second opinion on the
    ranking's compute and memory part (collectives left out), from the compiler's own cost model,
    which section 9b measures against the chip."""
    from benchmarks.tpu_corpus_report import MXU_MACS, module_cycles
    from shardscope.config.layout_candidates import Candidate
    from shardscope.pipeline.layout_compile import compile_candidate
    from shardscope.pipeline.layout_pool import SweepJob
    from shardscope.pipeline.layout_worker import load_job

    chip = case.target.split(":")[1]
    if chip not in MXU_MACS:
        raise SystemExit(f"no clock for {chip}'s cycles (benchmarks/tpu_corpus_report.py MXU_MACS)")
    rows = {"pick": _pick(result), "published": _published_row(result)}
    function, target = load_job(SweepJob(Path(case.file), case.function, case.target, (), True))
    out: dict[str, Any] = {"commit": commit() or "-", "candidates": {}}
    for role, row in rows.items():
        if row is None:
            continue
        wanted = row["candidate"]
        made = compile_candidate(function, Candidate(tuple(wanted["mesh"].items()), tuple(wanted["options"].items())),
                                 target, keep_text=True)
        if made.hlo_text is None:
            out["candidates"][role] = {"label": wanted["label"], "error": made.reason}
            continue
        out["candidates"][role] = {"label": wanted["label"], "per_step": row["per_step"],
                                   **module_cycles(made.hlo_text, chip)}
    return out




# --------------------------------------------------------------------------- reading a result


def _rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    return result["ranking"]["rows"]


def _summed(result: dict[str, Any]) -> bool:
    """Whether ``result`` is a TPU sweep judged by the sum of ``memory_analysis()``'s kinds (see :data:`FIT`)."""
    return result.get("fit") != FIT and result["target"].startswith("tpu:")


def rejudged(result: dict[str, Any]) -> dict[str, Any]:
    """A TPU sweep judged by the sum, judged again by libtpu's own verdicts on the same compiles: a
    candidate it compiled fits (it refuses one whose peak exceeds what the chip lets a program
    use, the capacity shardscope compares with), one it refused does not; a compiled one's bytes
    were not recorded (``summed`` keeps the sum, which overstates them). Ranked again as ``layouts`` ranks: those
    that fit first, each group by its exposed step per token; the pick the first that fits."""
    if not _summed(result):
        return result
    rows = []
    for row in _rows(result):
        fit = row.get("fit") or {}
        if row["outcome"] in ("fits", "does not fit") and not fit.get("refused") and fit.get("needed_bytes"):
            row = {**row, "outcome": "fits", "summed": fit.get("needed_bytes"),
                   "fit": {**fit, "needed_bytes": None, "fits": True}}
        rows.append(row)
    rows.sort(key=lambda row: (row["outcome"] != "fits", _cost(row) is None, _cost(row) or 0.0))
    rows = [{**row, "rank": rank} for rank, row in enumerate(rows, 1)]
    pick = next((row for row in rows if row["outcome"] == "fits" and _cost(row) is not None), None)
    why = ("no pick: libtpu compiled none of the candidates" if pick is None else
           f"pick: {pick['candidate']['label']}: the fastest per token of the candidates libtpu compiled "
           "(judged again from this sweep's compiles: see below)")
    return {**result, "ranking": {**result["ranking"], "rows": rows, "why": why,
                                  "pick": None if pick is None else {"label": pick["candidate"]["label"]}}}


def _published_row(result: dict[str, Any]) -> dict[str, Any] | None:
    wanted = result["published"]
    for row in _rows(result):
        mesh = {axis: size for axis, size in row["candidate"]["mesh"].items() if size > 1}
        if mesh == wanted:
            return row
    return None


def _pick(result: dict[str, Any]) -> dict[str, Any] | None:
    label = (result["ranking"]["pick"] or {}).get("label")
    return next((row for row in _rows(result) if row["candidate"]["label"] == label), None)


def _cost(row: dict[str, Any]) -> float | None:
    """What the ranking orders by: the exposed step per token."""
    step, per_step = row.get("step"), row.get("per_step")
    return None if step is None or not per_step else step["high_s"] / per_step


def matches(result: dict[str, Any]) -> tuple[bool, float | None]:
    """Whether the published layout is the pick or within :data:`WITHIN` of it, and the ratio."""
    published, pick = _published_row(result), _pick(result)
    if published is None or pick is None:
        return False, None
    if published is pick:
        return True, 1.0
    ours, theirs = _cost(pick), _cost(published)
    if ours is None or theirs is None or published["outcome"] not in ("fits", "unknown"):
        return False, None
    return theirs / ours <= WITHIN, theirs / ours


def _label(row: dict[str, Any]) -> str:
    mesh = " x ".join(f"{axis}={size}" for axis, size in row["candidate"]["mesh"].items() if size > 1)
    return mesh or "1 device"


def _memory(row: dict[str, Any]) -> str:
    fit = row.get("fit") or {}
    needed = fit.get("needed_bytes")
    if row.get("summed") is not None:
        return f"fits: compiled (the sum said {row['summed'] / 2**30:.2f} GiB)"
    text = "-" if needed is None else f"{needed / 2**30:.2f} GiB"
    return {"fits": text, "unknown": text}.get(row["outcome"], f"{row['outcome']}" + ("" if needed is None else f": {text}"))


def _range(row: dict[str, Any], key: str, scale: float = 1.0, digits: int = 2) -> str | None:
    step = row.get("step")
    if step is None:
        return None
    if key == "step":
        return f"{step['low_s'] * scale:.{digits}f}-{step['high_s'] * scale:.{digits}f}"
    values = row.get(key)
    if values is None:
        return None
    low, high = (values["low"], values["high"]) if isinstance(values, dict) else values
    return f"{low * scale:,.{digits}f}-{high * scale:,.{digits}f}"


def _top(row: dict[str, Any]) -> str | None:
    groups = [g for g in row.get("collectives", []) if g.get("share_of_step")]
    if not groups:
        return None
    g = groups[0]
    return f"{g['kind']} {' x '.join(g['axes'])}{' (loop)' if g['in_loop'] else ''}: {g['share_of_step']:.0%}"


def fsdp_analysis(result: dict[str, Any]) -> list[str]:
    """The per-device batch below which pure FSDP is bound by its collectives, and where tensor
    parallelism starts to pay, from the sweep's own estimates (see the prose it writes)."""
    if not result.get("fsdp_analysis"):
        return []
    fsdp = next((r for r in _rows(result) if r["candidate"]["mesh"].get("tensor", 1) == 1
                 and r["candidate"]["mesh"].get("data", 1) == 1 and r["step"] is not None), None)
    if fsdp is None:
        return []
    batch = float(next(iter(fsdp["candidate"]["options"].values())))
    estimate = fsdp["step"]["estimate"]
    compute, comm = estimate["dispatched_s"], estimate["collectives_s"]
    critical = batch * comm / compute
    book = V5E_FLOPS / V5E_ICI_AXIS_BPS
    lines = ["", f"**Where FSDP turns collective-bound.** {_label(fsdp)} at {batch:g} sequences per chip: compute and "
             f"memory {compute:.2f} s, collectives {comm:.2f} s per step. Compute grows with the batch and the "
             f"weights' collectives do not, so they cross at about {critical:.2f} sequences per chip "
             f"({critical * TOKENS:,.0f} tokens; linear in the batch, the fixed part of the step (the optimizer's "
             f"update) left in). The [scaling book]({SCALING_BOOK}) puts FSDP's bound at the ICI's operational "
             f"intensity C / W_ici = {book:,.0f} tokens per chip over one axis, {book / 2:,.0f} over both axes of a "
             f"2D torus, counting the MLP's bf16 matmuls only."]
    pays = []
    for row in _rows(result):
        tensor = row["candidate"]["mesh"].get("tensor", 1)
        if tensor == 1 or row["step"] is None or row["outcome"] not in ("fits", "unknown"):
            continue
        e = row["step"]["estimate"]
        weights = sum(_exposed(g) for g in row["collectives"] if "tensor" not in g["axes"])
        activations = sum(_exposed(g) for g in row["collectives"] if "tensor" in g["axes"])
        slope = e["dispatched_s"] + activations - compute  # what grows with the batch, beyond FSDP's
        gained = comm - weights  # the weights' collectives tensor parallelism saves
        if slope > 0 and gained > 0:
            pays.append((batch * gained / slope, tensor, _label(row)))
    lines.append("")
    if pays:
        best = max(pays)
        lines.append(f"**Where tensor parallelism pays.** With nothing hidden, a tensor-parallel layout beats pure "
                     f"FSDP when the weights' collectives it saves outweigh the activations' collectives and the "
                     f"compute it adds: {best[2]} below about {best[0]:.2f} sequences per chip "
                     f"({best[0] * TOKENS:,.0f} tokens); every other split pays below less. The scaling book's "
                     f"mixed FSDP x tensor bound is 2 alpha^2 / F tokens per chip.")
    else:
        lines.append("**Where tensor parallelism pays.** Nowhere in this sweep: every tensor-parallel layout adds "
                     "more (its activations' collectives and compute) than it saves of the weights' collectives.")
    return lines


def _exposed(group: dict[str, Any]) -> float:
    """A collective group's seconds per step that may be exposed: all but what overlaps by
    construction in collective matmul loops (results before it was counted: all)."""
    return (group["seconds_per_step"] or 0) - (group.get("overlapped_seconds_per_step") or 0)


def _machine(result: dict[str, Any]) -> str:
    machine = result.get("machine") or {}
    return f"{machine.get('nproc', '?')} cores"


def _published_words(result: dict[str, Any]) -> str:
    """Where the published layout stands: the pick, within 10% of it, or why not (its estimated
    step per token against the pick's even when it does not fit this step's memory)."""
    ok, ratio = matches(result)
    published, pick = _published_row(result), _pick(result)
    if ratio == 1.0:
        return "the pick"
    if ok:
        return f"ranked within {ratio:.2f}x of the pick's step per token"
    if published is None:
        return f"**not** within {WITHIN - 1:.0%} of the pick: not in the sweep"
    if published["outcome"] in ("failed", "cut"):
        return f"**not** within {WITHIN - 1:.0%} of the pick: {published['outcome']} ({published.get('reason') or ''})"
    ours, theirs = (None if pick is None else _cost(pick)), _cost(published)
    against = ("" if ours is None or theirs is None
               else f"; its estimated step per token is {theirs / ours:.2f}x the pick's")
    return f"**not** the pick: {_memory(published)} per chip in this step{against}"


def _capacity(result: dict[str, Any]) -> str:
    sizes = {row["fit"]["capacity_bytes"] for row in _rows(result) if (row.get("fit") or {}).get("capacity_bytes")}
    return " or ".join(f"{size / 2**30:.2f} GiB" for size in sorted(sizes)) or "memory"


def _case_prose(result: dict[str, Any]) -> list[str]:
    ranking, sweep = result["ranking"], result["sweep"]
    pub = " x ".join(f"{axis}={size}" for axis, size in result["published"].items())
    load = f"load average {result['load_average_at_start']:.1f} at the start, {result['load_average_at_end']:.1f} at the end"
    env = "".join(f"{name}={value} " for name, value in result.get("env", {}).items())
    lines = [f"`{env}shardscope {result['command']}` ({'cold: every candidate compiled' if result['cold'] else 'read back from the compilation cache'}; "
             f"{sweep['wall_s'] / 60:.1f} min wall, {sweep['user_s'] + sweep['sys_s']:,.0f} s of CPU, "
             f"peak RSS {sweep['max_rss_mib']:,.0f} MiB; on {_machine(result)}, {load}). "
             f"Published ({result['source']}): {pub}: {_published_words(result)}.",
             "", f"> {ranking['why']}"]
    if _summed(result):
        lines += ["", "**Judged again.** This sweep ran before shardscope took libtpu's `peak_memory_in_bytes` as "
                      "a TPU step's need (ab605fb); it summed arguments + outputs + temporaries - aliases, and libtpu's "
                      "temporaries overstate a scanned step's. libtpu compiled every candidate marked *fits* above, "
                      f"and it refuses any whose peak exceeds the chip's {_capacity(result)}, so each fits by the compiler's own "
                      "check; its exact bytes were not recorded (the sum is shown, more than the peak). The ranking "
                      "and the pick are the sweep's own estimates ordered again. Rerun the case for the bytes."]
    published, pick = _published_row(result), _pick(result)
    if result["target"].startswith("tpu:") and matches(result)[0] and published is not None and pick is not None \
            and published["candidate"]["label"] != pick["candidate"]["label"]:
        why = why_published_loses(result)  # within the bar yet behind the pick: say why (a miss says so below)
        lines += ["", why] if why else []
    lines += _estimate_words(result) + _cycles_words(result) + _budget_words(result)
    for other in result.get("elsewhere", []):
        again = other["ranking"]["pick"]["label"] == ranking["pick"]["label"]
        lines += ["", f"**The same sweep on {_machine(other)}** (load average {other['load_average_at_start']:.1f} at "
                      f"the start, {other['load_average_at_end']:.1f} at the end, {plural(other['workers'], 'worker')}; commit "
                      f"{other['commit']}): {other['sweep']['wall_s'] / 60:.1f} min wall, "
                      f"{other['sweep']['user_s'] + other['sweep']['sys_s']:,.0f} s of CPU, peak RSS "
                      f"{other['sweep']['max_rss_mib']:,.0f} MiB, {other['ranking']['cost']['compile_cpu_s']:,.0f} s "
                      f"of that CPU in its candidates' compiles; {'the same pick' if again else 'another pick'} "
                      f"({other['ranking']['pick']['label']})."] + _budget_words(other)[1:]
    return lines


def _budget_words(result: dict[str, Any]) -> list[str]:
    """The sweep against JAX's own compiles of its candidates (``bare``), where the result has them."""
    bare, sweep, ranking = result.get("bare"), result["sweep"], result["ranking"]
    if not bare or not bare.get("candidates"):
        return []
    cpu = sum(c["cpu_s"] for c in bare["candidates"])
    wall = sum(c["wall_s"] for c in bare["candidates"])
    longest = max(c["wall_s"] for c in bare["candidates"])
    cores = (result.get("machine") or {}).get("nproc") or 1
    workers = ranking["cost"]["workers"]
    used = min(workers, cores)
    floor = max(wall / used, longest)
    measured = f" (measured {bare['measured']})" if bare.get("measured") else ""
    return ["", f"JAX's own route (`benchmarks/bare_layouts.py`: each candidate's build, lower and compile "
                f"for the slice's devices, one after another in one process){measured}: {wall / 60:.1f} min wall, "
                f"{cpu:,.0f} s of CPU for the {len(bare['candidates'])} candidates the sweep compiled. The "
                f"sweep took {sweep['wall_s']:,.0f} s on {workers} workers: {sweep['wall_s'] / wall:.2f}x JAX's "
                f"compiles one after another, {sweep['wall_s'] / (wall / used):.2f}x their sum divided by the "
                f"{used} workers ({wall / used:,.0f} s), and {sweep['wall_s'] / floor:.2f}x the least any sweep "
                f"could take ({floor:,.0f} s: that sum, or the longest single compile, {longest:,.0f} s, "
                f"whichever is longer; XLA's compile runs on several threads, so compiles side by side slow "
                f"each other). Its CPU: {sweep['user_s'] + sweep['sys_s']:,.0f} s against {cpu:,.0f} s "
                f"({(sweep['user_s'] + sweep['sys_s']) / cpu:.2f}x)."]


def _cycles_words(result: dict[str, Any]) -> list[str]:
    """XLA:TPU's own cycles beside shardscope's roofline for the pick and the published layout
    (:func:`cycles`), where the result has them and the two differ."""
    found = (result.get("cycles") or {}).get("candidates") or {}
    pick, published = found.get("pick"), found.get("published")
    if not pick or not published or pick["label"] == published["label"] or "error" in pick or "error" in published:
        return []

    def per_token(row: dict[str, Any], key: str) -> float:
        return row[key] / row["per_step"]

    ours = per_token(published, "covered_s") / per_token(pick, "covered_s")
    theirs = per_token(published, "xla_s") / per_token(pick, "xla_s")
    share = min(published["covered_s"] / published["roofline_s"], pick["covered_s"] / pick["roofline_s"])
    return ["", f"**A second opinion: XLA:TPU's own cycles** (`python -m benchmarks.layout_anchors --case "
                f"{result['case']} --cycles`, commit {result['cycles']['commit']}: the two compiled again). On the "
                f"instructions XLA wrote `estimated_cycles` for ({share:.0%} or more of each one's roofline), "
                f"compute and memory only (collectives left out), per token: shardscope's roofline puts "
                f"{_mesh_words(published['label'])} at {ours:.2f}x {_mesh_words(pick['label'])}, the compiler's own "
                f"cycles at {theirs:.2f}x ({seconds_words(published['xla_s'])} against "
                f"{seconds_words(pick['xla_s'])} a step). {_agreeing(ours, theirs)} The compiler's cycles overstate "
                "memory-bound work on a real v5e (section 9b): a second opinion, not the answer."]


def _agreeing(ours: float, theirs: float) -> str:
    """Whether the two models rank the published layout on the same side of the pick."""
    if ours > 1 and theirs > 1:
        return "Both models rank the published layout behind the pick."
    if ours <= 1 and theirs <= 1:
        return "Both models rank the published layout at or ahead of the pick in compute and memory."
    return "The two models rank the published layout on opposite sides of the pick."


def _mesh_words(label: str) -> str:
    """``fsdp=16 x tensor=16`` of a candidate's label (its options left off)."""
    return label.split(", ")[0]


def _estimate_words(result: dict[str, Any]) -> list[str]:
    """What a TPU sweep's estimate lacks of today's (:data:`ESTIMATES`), with the commit it ran
    when the result says (``estimate_note``); nothing for today's."""
    recorded = result.get("estimate") or ""
    if recorded == ESTIMATE or not result["target"].startswith("tpu:"):
        return []
    keys = [key for key, _, _ in ESTIMATES]
    since = keys.index(recorded) if recorded in keys else 0
    changes = "; ".join(f"before {commit} it {what}" for _, commit, what in ESTIMATES[since:])
    note = f" ({result['estimate_note']})" if result.get("estimate_note") else ""
    return ["", f"**Estimated before {ESTIMATES[-1][1]}.** This sweep's estimate{note}: {changes} "
                "(docs/guides/memory-and-step.md). Rerun the case for today's estimates."]


def _summary(results: dict[str, Any]) -> list[SummaryRow]:
    rows = []
    for name, result in results.items():
        if result.get("mode") == "smoke":
            continue
        result = rejudged(result)
        ok, ratio = matches(result)
        measured = _published_words(result).replace("**", "")
        rows.append(SummaryRow(f"`layouts` on {result['target']}, {result['case']}: the published layout",
                               f"the pick or within {WITHIN - 1:.0%}", measured, "met" if ok else "**missed**"))
        for run in (result, *result.get("elsewhere", [])):
            bare = run.get("bare")
            if bare and bare.get("candidates"):
                cpu = sum(c["cpu_s"] for c in bare["candidates"])
                spent = run["sweep"]["user_s"] + run["sweep"]["sys_s"]
                rows.append(SummaryRow(f"`layouts` on {result['target']}, {result['case']}: the sweep's CPU "
                                       f"({_machine(run)}, {plural(run['ranking']['cost']['workers'], 'worker')})",
                                       "<= JAX's own compiles of its candidates", f"{spent / cpu:.2f}x",
                                       "met" if spent <= cpu else "**missed**"))
    return rows


def why_published_loses(result: dict[str, Any]) -> str:
    """Where the published layout's step goes beyond the pick's, from the two rows' estimates: its
    compute and memory (the same flops, more bytes) and its collectives over tensor, what of them
    overlaps by construction and what is left exposed (empty when either has no estimate)."""
    published, pick = _published_row(result), _pick(result)
    if published is None or pick is None or not published.get("step") or not pick.get("step"):
        return ""
    ours, theirs = pick["step"]["estimate"], published["step"]["estimate"]
    tensor = [g for g in published["collectives"] if "tensor" in g["axes"] and g["seconds_per_step"] is not None]
    seconds = sum(g["seconds_per_step"] for g in tensor)
    overlapped = sum(g.get("overlapped_seconds_per_step") or 0 for g in tensor)
    per = (pick["per_step"] or 1) / (published["per_step"] or 1)
    left: dict[str, float] = {}
    for g in tensor:
        left[g["kind"]] = left.get(g["kind"], 0.0) + (g["seconds_per_step"] - (g.get("overlapped_seconds_per_step") or 0)) * per
    exposed = ", ".join(f"{kind}s {value:.2f} s" for kind, value in sorted(left.items(), key=lambda kv: -kv[1])
                        if value >= 0.05)
    bound = (f"its compute and memory take {theirs['dispatched_s'] * per:.2f} s per step of the same tokens"
             if published["step"]["low_s"] <= theirs["dispatched_s"] else
             f"its collectives alone take {published['step']['low_s'] * per:.2f} s per step of the same tokens, more "
             f"than its compute and memory ({theirs['dispatched_s'] * per:.2f} s)")
    return (f"**Why {_label(published)} loses on {result['case']}.** With every collective hidden it still takes "
            f"{published['step']['low_s'] * per / pick['step']['low_s']:.2f}x the pick's step per token: {bound}, "
            f"against the pick's ({_label(pick)}) {pick['step']['low_s']:.2f} s; it does the same flops per chip "
            f"({theirs['flops'] / ours['flops']:.3f}x) and moves {theirs['bytes'] / ours['bytes']:.2f}x the bytes "
            f"(each step of a collective matmul loop reads again the whole operand it does not slice, the layer's "
            f"activations or their gradient, and writes its partial sums to HBM to be added to those passed round "
            f"the ring; the activations gathered over tensor are copied into the matmuls' layouts; the estimate "
            f"moves every fusion's operands through HBM, none kept on chip). Its collectives over tensor take "
            f"{seconds * per:.2f} s, "
            f"{overlapped * per:.2f} s of them overlapped by construction (the permutes of collective matmul loops "
            f"beside their matmul chunks, the activations' all-gathers beside the work of the fusions that step "
            f"them); the rest ({exposed}) is what its exposed step ({published['step']['high_s'] * per:.2f} s "
            f"against {pick['step']['high_s']:.2f} s) adds: where a loop's collectives outlast its own work.")


def _misses(results: dict[str, Any]) -> list[str]:
    """Why a published layout is not the pick: what the step needs of each chip's memory there."""
    missed = [r for r in map(rejudged, results.values()) if r.get("mode") != "smoke" and not matches(r)[0]]
    lines = []
    maxtext = [r for r in missed if r["source"] == MAXTEXT and _published_row(r) is not None]
    if maxtext:
        words = "; ".join(f"{r['case']} {' x '.join(f'{a}={n}' for a, n in r['published'].items())}: "
                          f"{_published_words(r).replace('**', '')}" for r in maxtext)
        lines += [f"**MaxText layouts not matched (section 11).** {words}. Memory is the compiler's own peak per "
                  "chip; the step is `benchmarks/decoder_step.py`, not MaxText's (no Pallas splash kernel, no "
                  "`qkv_proj_offloaded`; MaxText's XLA flags are libtpu's defaults here). Its tensor parallelism is MaxText's logical axis rules (the activations' embedding "
                  "split over tensor between layers, heads and MLP over tensor): no work is repeated over the "
                  "tensor group.", ""]
        lines += [line for r in maxtext if why_published_loses(r) for line in (why_published_loses(r), "")]
    for r in missed:
        published, pick = _published_row(r), _pick(r)
        if r["source"] != NVIDIA or published is None or not published.get("fit"):
            continue
        fit, env = published["fit"], "".join(f" with {k}={v}" for k, v in r.get("env", {}).items())
        need, room = fit["needed_bytes"] / 2**30, fit["capacity_bytes"] / 2**30
        head = f"**{r['case']}: NVIDIA's layout on {r['target']}{env}.** "
        if published["outcome"] == "cut":
            lines += [head + "NVIDIA runs GPT-3 175B at tensor 4 x pipeline 8 on many more GPUs, with data-parallel "
                      "replicas that shard the optimizer's state (Megatron's distributed optimizer). On this slice the "
                      f"weights and AdamW's float32 state alone take {need:.2f} GiB per device in that layout, more "
                      f"than the {room:.2f} GiB a JAX process may use of each GPU, so every candidate is cut before "
                      "compiling: the right answer for this slice.", ""]
        elif published["outcome"] != "fits":
            lines += [head + f"The compiler's count for the published layout is {need:.2f} GiB per device, more than "
                      f"the {room:.2f} GiB a JAX process may use (JAX's default pool, 75% of each GPU's memory): "
                      "nothing fits. Training runs raise the pool (`XLA_PYTHON_CLIENT_MEM_FRACTION`); the case "
                      "with 95% ranks the same compiles.", ""]
        elif pick is not None and _cost(pick) and _cost(published):
            lines += [head + f"It fits ({_memory(published)}) and ranks {published['rank']}, "
                      f"{_cost(published) / _cost(pick):.2f}x the pick's step per token ({_label(pick)}). "
                      + fsdp_against_megatron(published, pick), ""]
    return lines


def _fsdp_gathers(row: dict[str, Any]) -> float:
    """The share of ``row``'s exposed step in all-gathers over ``fsdp`` inside loops."""
    return sum(g.get("share_of_step") or 0 for g in row.get("collectives", [])
               if g["kind"] == "all-gather" and "fsdp" in g["axes"] and g["in_loop"])


def _collectives_per_token(row: dict[str, Any]) -> float:
    return row["step"]["estimate"]["collectives_s"] / row["per_step"]


def fsdp_against_megatron(published: dict[str, Any], pick: dict[str, Any]) -> str:
    """Why NVIDIA's data axis costs more here than in Megatron: this program's is FSDP, its weights
    gathered in every layer loop; and how the pick splits that axis."""
    split = pick["candidate"]["mesh"].get("fsdp", 1)
    theirs = ("The pick keeps that axis at 1." if split == 1 else
              f"The pick splits it {split} ways too ({_fsdp_gathers(pick):.0%} of its exposed step in those "
              f"all-gathers): the published layout's collectives take "
              f"{_collectives_per_token(published) / _collectives_per_token(pick):.2f}x the pick's time per token.")
    return (f"Its data axis is this program's FSDP: every layer loop all-gathers the weights "
            f"({_fsdp_gathers(published):.0%} of its exposed step), where NVIDIA's data parallelism is Megatron's "
            f"distributed optimizer, which gathers the weights once a step. {theirs}")


BENCHMARK = Benchmark(
    name="layout_anchors",
    heading="11. Which layout is fastest: published layouts against `shardscope layouts`",
    files=("layout_anchors_*.json",),
    several=True,
    summary=_summary,
    misses=_misses,
    rerun="python -m benchmarks.layout_anchors --case NAME [--bare]",
    blocks=(
        Prose(lambda results: [
            "Each case is one `shardscope layouts` sweep of a train step at a published model's dimensions "
            "(`benchmarks/decoder_step.py`: scanned layers under full rematerialization, float32 weights computed "
            "in bfloat16, AdamW; `benchmarks/pipelined_step.py` adds pipeline stages), compiled for the slice with "
            "nothing run. Steps are per call dispatched back to back, from every collective hidden behind compute "
            "to none hidden; tokens/s and MFU per chip at the same two ends (MFU from the model's 6N flops per token "
            "plus attention, rematerialization not counted). Attention runs over blocks of 512 queries, each "
            "rematerialized: a flash kernel's memory (one block's scores live), the same flops as MaxText's Pallas "
            "kernel and more bytes moved. The projections are fused where MaxText's configurations fuse them "
            "(`fused_qkv`: one matmul for the query, key and value projections, GPT-3 175B's model file and the "
            "128B model's v5e-256 tuning; `fused_mlp`: one for the MLP's two input projections, the 128B model's): "
            "the same flops in fewer matmuls, and with tensor parallelism the layer's input gathered over tensor "
            "once for the fused projections, not once for each (its all-gathers and collective matmul loops over "
            "tensor). What MaxText's configurations add and this "
            "step does not: `qkv_proj_offloaded` (the query, key and value projections saved to the host's memory, "
            "not recomputed), `adam_pax` for GPT-3. "
            "MaxText's XLA flags for these models (async collective fusion of all-gathers, the data-parallel "
            "all-reduce overlap) are libtpu 0.0.42.1's defaults, or left to `auto`, in these compiles. Memory "
            "per chip is libtpu's own peak (`peak_memory_in_bytes`: the arguments and the block of temporaries its "
            "buffer assignment lays out, the figure it refuses a program by); `benchmarks/bare_layouts.py --dump` "
            "writes a candidate's buffer assignment and the buffers live at its peak, by name (for Llama-2 70B over "
            "fsdp=256: the donated train state, the scan's saved layer inputs, and in the backward loop the "
            "stack's float32 gradients, two layers' gathered bf16 weights, the head's float32 gradient before its "
            "reduce-scatter and the float32 logits; docs/guides/memory-and-step.md). The cases ran where each says: "
            "the host of a TPU VM (`.dev-anchors` in the repository's history: the chip is not used; a compile "
            "for a slice is the same on any x86-64 host) or this machine."]),
        Each(items=lambda results: [rejudged(results[name]) for name in sorted(results)], blocks=(
            Table(
                heading=lambda r: f"{r['case']} on {r['target']}",
                columns=(
                    Column("#", lambda row: str(row["rank"])),
                    Column("layout", _label, align="left"),
                    Column("options", lambda row: ", ".join(f"{k}={v}" for k, v in row["candidate"]["options"].items()),
                           align="left"),
                    Column("memory per chip", _memory, align="left"),
                    Column("step hidden-exposed (s)", lambda row: _range(row, "step"), better="lower"),
                    Column("tokens/s/chip", lambda row: _range(row, "per_chip_per_s", digits=0), better="higher"),
                    Column("MFU (%)", lambda row: _range(row, "utilization", scale=100, digits=0), better="higher"),
                    Column("costliest collectives: share of the exposed step", _top, align="left"),
                    Column("compile CPU", lambda row: row["compile_cpu_s"], unit="s", digits=0),
                ),
                rows=_rows,
            ),
            Prose(_case_prose),
            Prose(fsdp_analysis),
        )),
    ),
)


if __name__ == "__main__":
    main()
