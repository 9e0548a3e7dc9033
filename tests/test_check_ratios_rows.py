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


def test_the_thread_stacks_of_the_cpu_devices_are_xlas_pools():
    """A fresh process that starts 16 CPU devices holds one 8 MiB stack per thread of XLA's CPU
    client's pools (no more than the threads it started, read apart from the mappings): at least
    ``max(cores, devices)`` pool threads and ``min(that, 256)`` Eigen threads (``GetPjRtCpuClient``
    and the ``PjRtCpuClient`` constructor in ``xla/pjrt/cpu/cpu_client.cc``; exactly those on
    jaxlib 0.10.2, two more threads per device on 0.12)."""
    import os

    import jax

    found = check_ratios._thread_stacks(16)
    pool = max(os.cpu_count() or 1, 16)
    started = found["stacks"] - found["stacks_before"]
    assert found["devices"] == 16
    assert started <= found["threads"] - found["threads_before"]  # each a thread's (XLA starts a few more of other sizes)
    assert started >= pool + min(pool, 256)
    if jax.__version__ == "0.10.2":
        assert started == pool + min(pool, 256)
    assert 0 < found["stacks_rss_kib"] - found["stacks_rss_kib_before"] <= started * 8 * 1024


def test_the_sandbox_note_is_said_with_the_rows_measured_in_one():
    sandbox = {**TPU_VM, "platform": "Linux-4.4.0-x86_64-with-glibc2.36"}
    stacks = {"cpu_devices@1024/13 cores": {"devices": 1024, "threads_before": 13, "threads": 1301, "stacks_before": 14,
                                           "stacks": 1294, "stacks_rss_kib_before": 33 * 1024,
                                           "stacks_rss_kib": 1533 * 1024, "rss_kib_before": 383_816,
                                           "rss_kib": 2_042_104, "machine": sandbox}}
    row = _row("moe", 1024, machine=sandbox, rounds=2, check_rss_mib={"median": 4568.0}, bare_rss_mib={"median": 2886.0})
    prose = check_ratios._described({"rows": {"moe@1024/13 cores": row}, "thread_stacks": stacks})
    assert "gVisor" in prose[-1]
    assert "1,280 more 8 MiB mappings holding 1,500 MiB more, RSS +1,619 MiB" in prose[-1]  # 1294-14, 1533-33
    assert "1,682 MiB between the two peaks" in prose[-1]  # 4568 - 2886
    linux = _row("moe", 1024, machine={**HERE, "platform": "Linux-6.18.44-x86_64"}, rounds=1)
    assert not any("gVisor" in line for line in check_ratios._described({"rows": {"moe@1024/2 cores": linux}}))
