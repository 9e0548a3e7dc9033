"""BENCHMARKS.md section 11 reads a TPU sweep judged by the sum of memory_analysis()'s kinds again
by libtpu's own verdicts (benchmarks/layout_anchors.py's ``rejudged``): a candidate libtpu compiled
fits, one it refused does not, and the pick is the fastest per token of those that fit."""

from __future__ import annotations

from benchmarks.layout_anchors import FIT, fsdp_against_megatron, matches, rejudged, why_published_loses

GIB = 2**30
CAPACITY = int(15.75 * GIB)


def _row(label: str, outcome: str, needed: float, high_s: float, refused: bool = False) -> dict:
    return {"rank": 0, "candidate": {"label": label, "mesh": dict(pair.split("=") for pair in label.split(" x ")),
                                     "options": {"per_device_batch": 2}},
            "outcome": outcome, "fit": {"needed_bytes": int(needed * GIB), "capacity_bytes": CAPACITY, "refused": refused},
            "step": None if refused else {"low_s": high_s / 2, "high_s": high_s}, "per_step": None if refused else 100.0}


def _result(target: str = "tpu:v5e:16x16", **extra: object) -> dict:
    rows = [_row("fsdp=128 x tensor=2", "fits", 14.79, 20.35),
            _row("fsdp=16 x tensor=16", "refused", 30.53, 0.0, refused=True),
            _row("fsdp=256", "does not fit", 19.53, 19.99)]
    for row in rows:
        row["candidate"]["mesh"] = {axis: int(size) for axis, size in row["candidate"]["mesh"].items()}
    return {"case": "llama2_70b", "target": target, "published": {"fsdp": 256}, "source": "MaxText",
            "ranking": {"rows": rows, "pick": {"label": "fsdp=128 x tensor=2"}, "why": "pick: fsdp=128 x tensor=2"},
            **extra}


def test_a_tpu_sweep_judged_by_the_sum_is_judged_again_by_what_libtpu_compiled():
    again = rejudged(_result())
    rows = {row["candidate"]["label"]: row for row in again["ranking"]["rows"]}
    # fsdp=256 compiled (libtpu refuses what exceeds the chip): it fits, and is faster per token (19.99 < 20.35)
    assert rows["fsdp=256"]["outcome"] == "fits" and rows["fsdp=256"]["summed"] == int(19.53 * GIB)
    assert rows["fsdp=256"]["fit"]["needed_bytes"] is None  # its peak was not recorded
    assert rows["fsdp=128 x tensor=2"]["summed"] == int(14.79 * GIB)  # a sum that fitted is still a sum
    assert rows["fsdp=16 x tensor=16"]["outcome"] == "refused"  # libtpu's refusal stands
    assert [row["candidate"]["label"] for row in again["ranking"]["rows"]] == ["fsdp=256", "fsdp=128 x tensor=2",
                                                                              "fsdp=16 x tensor=16"]
    assert [row["rank"] for row in again["ranking"]["rows"]] == [1, 2, 3]
    assert again["ranking"]["pick"] == {"label": "fsdp=256"}
    assert matches(again) == (True, 1.0)
    assert matches(_result()) == (False, None)  # judged by the sum: the published layout did not fit


def test_a_sweep_judged_by_the_peak_or_on_a_gpu_is_read_as_it_is():
    for result in (_result(fit=FIT), _result("gpu:h100:8x8")):
        assert rejudged(result) is result


def _estimated(label: str, dispatched: float, flops: float, moved: float, high: float, groups: list) -> dict:
    mesh = {axis: int(size) for axis, size in (pair.split("=") for pair in label.split(" x "))}
    return {"candidate": {"label": label, "mesh": mesh, "options": {"per_device_batch": 1}}, "outcome": "fits",
            "per_step": 524288.0, "step": {"low_s": dispatched, "high_s": high,
                                           "estimate": {"dispatched_s": dispatched, "flops": flops, "bytes": moved}},
            "collectives": [{"kind": kind, "axes": axes, "seconds_per_step": seconds,
                             "overlapped_seconds_per_step": overlapped} for kind, axes, seconds, overlapped in groups]}


def test_why_the_published_layout_loses_is_read_from_the_two_rows_estimates():
    """The sentence's figures, by hand from the rows: compute and memory 15.77 s against 13.46 s,
    flops 2.005e15 / 2.003e15 = 1.001x, bytes 7.1e12 / 3.3e12 = 2.15x; over tensor 6.82 + 4.00 =
    10.82 s, 0.67 + 3.50 = 4.17 s overlapped, 6.15 s and 0.50 s left (the fsdp all-gather not
    counted); with everything hidden 15.77 / 13.46 = 1.17x."""
    pick = _estimated("fsdp=128 x tensor=2", 13.46, 2.003e15, 3.3e12, 17.26,
                      [("all-gather", ["fsdp"], 2.34, 0.0)])
    published = _estimated("fsdp=16 x tensor=16", 15.77, 2.005e15, 7.1e12, 22.42,
                           [("all-gather", ["tensor"], 6.82, 0.67), ("collective-permute", ["tensor"], 4.0, 3.5),
                            ("all-gather", ["fsdp"], 0.54, 0.0)])
    result = {"case": "default_128b", "target": "tpu:v5e:16x16", "published": {"fsdp": 16, "tensor": 16},
              "source": "MaxText", "fit": FIT, "ranking": {"rows": [pick, published], "pick": {"label": pick["candidate"]["label"]}}}
    words = why_published_loses(result)
    assert "With every collective hidden it still takes 1.17x the pick's step per token" in words  # 15.77 / 13.46
    assert "its compute and memory take 15.77 s per step of the same tokens, against the pick's (fsdp=128 x " \
           "tensor=2) 13.46 s" in words
    assert "the same flops per chip (1.001x) and moves 2.15x the bytes" in words
    assert "Its collectives over tensor take 10.82 s, 4.17 s of them overlapped by construction" in words
    assert "the rest (all-gathers 6.15 s, collective-permutes 0.50 s)" in words  # 6.82 - 0.67, 4.00 - 3.50
    assert "(22.42 s against 17.26 s)" in words
    published["step"]["low_s"] = 16.5  # its collectives longer than its compute and memory: the low end is theirs
    assert "its collectives alone take 16.50 s per step of the same tokens, more than its compute and memory " \
           "(15.77 s), against the pick's (fsdp=128 x tensor=2) 13.46 s" in why_published_loses(result)


def test_a_sweep_says_what_its_estimate_lacked_of_todays():
    """A result names the commits after its own estimate, each with what the estimate did until
    then; today's says nothing, nor does a GPU sweep's."""
    from benchmarks.layout_anchors import ESTIMATE, _estimate_words

    old = _result(fit=FIT)
    words = " ".join(_estimate_words(old))  # no key: before 8cec68c
    assert words.startswith(" **Estimated before ecc1377.** This sweep's estimate: before 8cec68c it counted")
    assert [commit in words for commit in ("8cec68c", "5ad8e14", "35fb2bd", "b906b05", "ecc1377")] == [True] * 5
    stepped = {**old, "estimate": "async collective fusion steps", "estimate_note": "ran commit 5ad8e14"}
    words = " ".join(_estimate_words(stepped))
    assert "(ran commit 5ad8e14): before 35fb2bd it counted the elements an all-gather" in words
    assert "8cec68c" not in words and "before 5ad8e14" not in words
    assert _estimate_words({**old, "estimate": ESTIMATE}) == []
    assert _estimate_words({**_result("gpu:h100:8x8"), "estimate": ""}) == []


def test_xlas_cycles_are_a_second_opinion_on_the_pick_and_the_published_layout_per_token():
    """``--cycles`` keeps each of the two layouts' roofline and XLA:TPU's cycles over the
    instructions both time; the words compare them per token (a hand count below), and say
    nothing where the pick is the published layout or the second opinion was not taken."""
    from benchmarks.layout_anchors import _cycles_words

    pick = {"label": "fsdp=128 x tensor=2, per_device_batch=1", "per_step": 1000.0,
            "roofline_s": 10.0, "covered_s": 9.0, "xla_s": 12.0}
    published = {"label": "fsdp=16 x tensor=16, per_device_batch=0.5", "per_step": 500.0,
                 "roofline_s": 6.0, "covered_s": 5.4, "xla_s": 9.0}
    result = {"case": "default_128b", "cycles": {"commit": "abc1234", "candidates": {"pick": pick, "published": published}}}
    (_, words), = [_cycles_words(result)]
    # per token: shardscope (5.4 / 500) / (9.0 / 1000) = 1.20; XLA (9.0 / 500) / (12.0 / 1000) = 1.50
    assert "puts fsdp=16 x tensor=16 at 1.20x fsdp=128 x tensor=2, the compiler's own cycles at 1.50x" in words
    assert "(90% or more of each one's roofline)" in words and "commit abc1234" in words
    assert "Both models rank the published layout behind the pick." in words
    faster = {**published, "xla_s": 5.0}  # XLA: (5.0 / 500) / (12.0 / 1000) = 0.83
    (_, words), = [_cycles_words({**result, "cycles": {"commit": "x", "candidates": {"pick": pick, "published": faster}}})]
    assert "at 0.83x" in words and "opposite sides of the pick" in words
    assert _cycles_words({"case": "x"}) == []
    assert _cycles_words({**result, "cycles": {"commit": "x", "candidates": {"pick": pick, "published": pick}}}) == []


def _gpu_row(mesh: dict[str, int], fsdp_share: float, collectives_s: float) -> dict:
    return {"candidate": {"mesh": mesh}, "per_step": 100.0, "step": {"estimate": {"collectives_s": collectives_s}},
            "collectives": [{"kind": "all-gather", "axes": ["fsdp"], "in_loop": True, "share_of_step": fsdp_share},
                            {"kind": "all-gather", "axes": ["tensor"], "in_loop": True, "share_of_step": 0.5},
                            {"kind": "all-gather", "axes": ["fsdp"], "in_loop": False, "share_of_step": 0.25}]}


def test_nvidias_data_axis_is_read_against_the_picks_split_of_it():
    published = _gpu_row({"fsdp": 2, "tensor": 4, "pipeline": 8}, 0.36, 24.0)
    # only the fsdp all-gathers inside loops count: 36%, not the tensor axis's nor the one outside loops
    assert "all-gathers the weights (36% of its exposed step)" in fsdp_against_megatron(published, published)
    kept = fsdp_against_megatron(published, _gpu_row({"tensor": 8, "pipeline": 8}, 0.0, 18.0))
    assert kept.endswith("The pick keeps that axis at 1.")
    split = fsdp_against_megatron(published, _gpu_row({"fsdp": 2, "tensor": 8, "pipeline": 4}, 0.30, 20.0))
    # 24 s against 20 s of collectives for the same 100 tokens
    assert split.endswith("The pick splits it 2 ways too (30% of its exposed step in those all-gathers): the "
                          "published layout's collectives take 1.20x the pick's time per token.")
