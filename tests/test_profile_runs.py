"""A user's own run, profiled as the guide says (issue 52): ``_profiled_trainer.py``, a jit with
shardings trainer (4 micro-batches, 8 CPU devices, a train step and an eval step per iteration,
dispatched ahead), its stored profiles (``fixtures/profiles/cpu_jax-<version>/``, both JAX
versions: ``capture_cpu.py`` writes them) read by ``check --profile-dir``.

Every expected number is computed in the test from the stored trace, through XProf's own
converter (``_profiles.by_hand``): the calls, the runs of the all-reduce per call on each device,
the step's and the all-reduce's time per call on the slowest device (the first call apart, the
others' median). Other programs of the same names (8 micro-batches, 4 devices) are one message
and exit status 2, the plans shown all the same.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from _profiles import by_hand, stored

pytest.importorskip("xprof")  # the hand computation reads the trace with XProf's converter

TRAINER = Path(__file__).parent / "_profiled_trainer.py"
MICRO, STEPS, DEVICES = 4, 5, 8


def _programs(result) -> dict[str, dict]:
    return {p["function"]: p for p in json.loads(result.stdout)["programs"]}


def _all_reduce(program: dict) -> str:
    (name,) = [c["name"] for c in program["compiled_collectives"] if c["kind"] == "all-reduce"]
    return name


@pytest.mark.parametrize("case", ["ahead", "block"])
def test_calls_runs_and_times_are_the_trace_s_own(case, tmp_path, shardscope_cli):
    folder = stored(case, tmp_path)
    result = shardscope_cli("check", TRAINER, "--profile-dir", folder, "--json")
    assert result.returncode == 1, result.stderr  # the all-reduce in the loop is deferrable; the profile maps
    programs = _programs(result)
    for function, module in (("train_step", "jit_train_step"), ("eval_step", "jit_eval_step")):
        program = programs[function]
        measured = program["measured"]
        name = _all_reduce(program)
        hand = by_hand(folder, module, name)
        assert measured["calls"] == hand.calls and measured["devices"] == hand.devices == DEVICES
        (collective,) = measured["collectives"]
        assert collective["name"] == name and {collective["runs_per_call"]} == hand.runs_per_call
        assert measured["first_call_s"] == pytest.approx(hand.first_step_us * 1e-6, rel=0.10)
        assert measured["step_s"] == pytest.approx(hand.step_us * 1e-6, rel=0.10)
        assert measured["fastest_step_s"] == pytest.approx(hand.fastest_step_us * 1e-6, rel=0.10)
        assert collective["per_step_s"] == pytest.approx(hand.collective_us * 1e-6, rel=0.10)
        assert measured["median_of_calls"] == hand.calls - 1
    train = programs["train_step"]["measured"]
    assert train["calls"] == STEPS and train["collectives"][0]["runs_per_call"] == MICRO  # 5 calls of 4 runs, not 1 of 20


def test_the_text_says_calls_per_call_and_the_first_call_apart(tmp_path, shardscope_cli):
    result = shardscope_cli("check", TRAINER, "--profile-dir", stored("ahead", tmp_path))
    text = " ".join(result.stdout.split())
    assert "measured: 5 calls of jit_train_step on 8 CPU devices" in text and "medians of the 4 after the first" in text
    assert "runs/call" in text and "per call" in text and "1 calls" not in text and "device(s)" not in text
    assert re.search(r"the first call took [\d.]+ [mu]?s", text) and "not in the medians" in text


def test_two_hosts_files_are_read_together(tmp_path, shardscope_cli):
    folder = stored("two_hosts", tmp_path)
    assert len(list(folder.rglob("*.xplane.pb"))) == 2
    programs = _programs(shardscope_cli("check", TRAINER, "--profile-dir", folder, "--json"))
    measured = programs["train_step"]["measured"]
    hand = by_hand(folder, "jit_train_step", _all_reduce(programs["train_step"]))
    assert measured["calls"] == hand.calls == STEPS and measured["devices"] == hand.devices == DEVICES
    assert measured["collectives"][0]["runs_per_call"] == MICRO
    assert measured["step_s"] == pytest.approx(hand.step_us * 1e-6, rel=0.10)


def test_one_host_s_file_says_it_holds_half_the_devices(tmp_path, shardscope_cli):
    folder = stored("two_hosts", tmp_path)
    one = next(folder.rglob("host0.xplane.pb"))
    result = shardscope_cli("check", TRAINER, "--profile-dir", one)
    text = " ".join(result.stdout.split())
    assert result.returncode == 1, result.stderr
    assert "on 4 of the program's 8 CPU devices" in text and "other hosts' files were not read" in text


@pytest.mark.parametrize(("case", "said"), [
    ("micro8", r"its jit_train_step runs the loop [\w.]+ 8 times per call, this program 4 \(another micro-batch count"),
    ("devices4", r"its jit_train_step, jit_eval_step ran on 4 devices, this program on 8"),
])
def test_another_program_of_the_same_names_is_one_message_and_the_plans_stay(case, said, tmp_path, shardscope_cli):
    result = shardscope_cli("check", TRAINER, "--profile-dir", stored(case, tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert re.search(said, " ".join(result.stderr.split())), result.stderr
    assert result.stderr.count("shardscope: error:") == 1
    assert "train_step: 1 compiled collective" in result.stdout  # the plan, without times
    assert "measured: " not in result.stdout.split("eval_step:")[0]


def test_a_damaged_profile_keeps_the_plans_and_says_why_there_are_no_times(tmp_path, shardscope_cli):
    whole = next(stored("ahead", tmp_path).rglob("*.xplane.pb"))
    run = tmp_path / "damaged" / "plugins" / "profile" / "run"
    run.mkdir(parents=True)
    (run / "host.xplane.pb").write_bytes(whole.read_bytes()[: whole.stat().st_size // 3])
    result = shardscope_cli("check", TRAINER, "--profile-dir", tmp_path / "damaged", "--json")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    data = json.loads(result.stdout)
    assert {p["function"] for p in data["programs"]} == {"train_step", "eval_step"}
    assert all(p["measured"] is None and p["compiled_collectives"] for p in data["programs"])
    (error,) = data["profile_errors"]
    assert "truncated or damaged" in error["error"] and data["exit_code"] == 2
    text = shardscope_cli("check", TRAINER, "--profile-dir", tmp_path / "damaged")
    assert "train_step: 1 compiled collective" in text.stdout and "no measured times" in text.stdout


def test_a_folder_of_two_runs_reads_the_newest_and_says_so(tmp_path, shardscope_cli):
    ahead = next(stored("ahead", tmp_path).rglob("*.xplane.pb"))
    both = tmp_path / "both" / "plugins" / "profile"
    for run in ("2026_01_01_00_00_00", "2026_02_01_00_00_00"):
        (both / run).mkdir(parents=True)
        (both / run / "vm.xplane.pb").write_bytes(ahead.read_bytes())
    result = shardscope_cli("check", TRAINER, "--profile-dir", tmp_path / "both")
    text = " ".join(result.stdout.split())
    assert "read the run 2026_02_01_00_00_00, the newest of 2" in text and "2026_01_01_00_00_00" in text


def test_a_train_and_an_eval_step_are_not_compared_as_plans():
    """The explorer's default comparison of a program file pairs programs that take the same
    arguments (two ways to write a step); a train step and an eval step take others: no speedup
    ("eval_step is 6.58x faster") and no diff between them."""
    from shardscope.config.settings import Settings
    from shardscope.pipeline.run import analyze

    analysis = analyze(Settings(path=TRAINER, repeats=2), measure=False)
    assert list(analysis.plans) == ["train_step", "eval_step"]
    comparison = analysis.comparison
    assert comparison.baseline == comparison.candidate == "train_step"
    assert comparison.speedup is None and comparison.diff == ()
