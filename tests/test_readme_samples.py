"""The README's command-output samples are what the commands print (``make readme`` writes them).

Each sample is compared with a fresh run of its commands: the same table rows with the same
cells, the same words, counts and bytes; only times, ratios, gradient errors (floating-point
noise) and the direction of the speedup may differ. The commands run in the test's process, as
``make readme`` runs them in their own: stdout not a terminal, ``COLUMNS`` at the README's width,
the exit status 0 or 1.
"""

from __future__ import annotations

import pytest

from screenshots import readme

SAMPLES = readme.samples(readme.README.read_text())


def test_the_readme_has_its_samples_marked():
    commands = [" ".join(run.args) for marker, _ in SAMPLES for run in readme.parse_runs(marker)]
    assert commands == [
        "report demos/rnn.py",
        "report demos/linear.py --project nvlink-h100:8",
        "check demos/train_step.py --function step",
        "check demos/train_step.py --function step_fixed",
        "check demos/gspmd_accumulate.py --function step",
        "check demos/explicit_accumulate.py",
        "check demos/reshard_clash.py --function add",
        "check demos/reshard_clash.py --function add_fixed",
        "check demos/dispatch_step.py",
        "report demos/linear.py --target tpu:v5e:2x2",
        "report demos/rnn.py --target tpu:v5e:2x2",
        "check demos/rnn.py --target tpu:v5e:2x2",
        "check demos/linear.py --target tpu:v5e:2x2",
        "sweep demos/linear.py --target tpu:v5e:2x2 --chunk-sizes 1,16 --memory-budget 30KiB",
        "check demos/gspmd_accumulate.py --function step --target gpu:h100:8",
        "check demos/fsdp_accumulate.py --target gpu:h100:8",
        "check demos/train_step.py --function step --what-if --project ib-ndr:64",
    ]


@pytest.mark.parametrize(("marker", "body"), SAMPLES, ids=[marker.split("|")[0].strip() for marker, _ in SAMPLES])
def test_each_sample_has_the_structure_of_a_fresh_run(marker, body, shardscope_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(readme.COLUMNS))

    def run(command: readme.Run) -> tuple[str, int]:
        result = shardscope_cli(*command.args, cwd=readme.ROOT)
        assert result.returncode in (0, 1), f"shardscope {' '.join(command.args)}:\n{result.stderr}"
        return result.stdout, result.returncode

    fresh = readme.fresh_sample(marker, run)
    assert readme.structure(body) == readme.structure(fresh), f"run `make readme`; the fresh sample:\n{fresh}"


def test_the_structure_masks_only_what_varies_from_run_to_run():
    one = "│ run median │ 1.530 ms │ 0.989 ms │\n│ bytes per call │ 17,024 │ 1,344 │\ndeferred is 1.55x faster " \
          "than naive (per-round ratios 1.18-2.98x); max_abs_err 7.63e-05"
    other = "│ run median │ 12.1 s │ 0.343 ms │\n│ bytes per call │ 17,024 │ 1,344 │\nno measurable difference " \
            "between naive and deferred (per-round ratios 0.93-1.12x, median 1.02x); max_abs_err 6.87e-05"
    assert readme.structure(one) == readme.structure(other)
    assert readme.structure(one.replace("17,024", "17,025")) != readme.structure(other)  # a byte count differs
    assert readme.structure("│ temp memory │ 54,728 B │") != readme.structure("│ memory/device: temporaries │ 54,728 B │")
