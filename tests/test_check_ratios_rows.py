"""Benchmark 7c keeps each row with the machine it ran on: a run on another host adds rows beside
the kept ones instead of taking their place or their machine (no JAX, no timing)."""

from __future__ import annotations

from benchmarks import check_ratios

TPU_VM = {"nproc": 13, "memory_gib": 45.0}
HERE = {"nproc": 2, "memory_gib": 23.4}


def _row(program: str, chips: int, **extra: object) -> dict:
    return {"program": program, "chips": chips, "ratios": [1.4], **extra}


def test_a_row_written_before_rows_kept_their_machine_takes_its_files():
    kept = {"machine": TPU_VM, "rounds": 1, "rows": {"moe@256": _row("moe", 256)}}
    rows = check_ratios._kept_rows(kept)
    assert list(rows) == ["moe@256/13 cores"]
    assert rows["moe@256/13 cores"]["machine"] == TPU_VM
    assert rows["moe@256/13 cores"]["rounds"] == 1


def test_rows_of_two_hosts_stand_side_by_side_and_keep_their_own_machine():
    kept = {"machine": HERE, "rounds": 3, "rows": {
        "moe@256/13 cores": _row("moe", 256, machine=TPU_VM, rounds=1),
        "moe@256/2 cores": _row("moe", 256, machine=HERE, rounds=3),
    }}
    rows = check_ratios._kept_rows(kept)
    assert {key: (row["machine"]["nproc"], row["rounds"]) for key, row in rows.items()} == {
        "moe@256/13 cores": (13, 1), "moe@256/2 cores": (2, 3)}
    # the table lists the many-core host's row first, and the prose names both machines
    assert [row["machine"]["nproc"] for row in check_ratios._rows({"rows": rows})] == [13, 2]
    prose = check_ratios._described({"rows": rows})[0]
    assert "13 cores, 45 GiB and on 2 cores, 23 GiB" in prose
    assert prose.endswith("1,024 chips not measured yet.")
