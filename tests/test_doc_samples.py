"""The docs' command-output samples are what the commands print (``make samples`` writes them).

Each sample in README.md and the pages under docs/ is compared with a fresh run of its commands:
the same table rows with the same cells, the same words, counts and bytes; only times, ratios,
gradient errors (floating-point noise) and the direction of the speedup may differ. The commands
run in the test's process, as ``make samples`` runs them in their own: stdout not a terminal,
``COLUMNS`` at the samples' width, the exit status 0 or 1.
"""

from __future__ import annotations

import pytest

from screenshots import samples

SAMPLES = [(path, marker, body) for path in samples.documents() for marker, body in samples.samples(path.read_text())]

MARKED = {
    "README.md": ["check demos/train_step.py --function step"],
    "docs/guides/check.md": ["check demos/train_step.py --function step",
                             "check demos/train_step.py --function step_fixed"],
    "docs/guides/ci.md": ["check demos/train_step.py --function step --format github"],
    "docs/guides/demos.md": ["report demos/rnn.py"],
    "docs/guides/dispatches.md": ["check demos/dispatch_step.py"],
    "docs/guides/jitted.md": ["check demos/gspmd_accumulate.py --function step",
                              "check demos/explicit_accumulate.py"],
    "docs/guides/layouts.md": ["layouts transformer_layouts --target tpu:v5e:2x4 --axis data=1 --option per_device_batch=1 "
                                "--workers 1"],
    "docs/guides/partitioner.md": ["check demos/reshard_clash.py --function add",
                                   "check demos/reshard_clash.py --function add_fixed"],
    "docs/guides/projections.md": ["report demos/linear.py --project nvlink-h100:8"],
    "docs/guides/targets.md": [
        "report demos/linear.py --target tpu:v5e:2x2",
        "report demos/rnn.py --target tpu:v5e:2x2",
        "check demos/rnn.py --target tpu:v5e:2x2",
        "check demos/linear.py --target tpu:v5e:2x2",
        "check demos/gspmd_accumulate.py --function step --target gpu:h100:8",
        "check demos/fsdp_accumulate.py --target gpu:h100:8",
        "sweep demos/linear.py --target tpu:v5e:2x2 --chunk-sizes 1,16 --memory-budget 10KiB",
    ],
    "docs/guides/what-if.md": ["check demos/train_step.py --function step --what-if --project ib-ndr:64"],
}
"""The samples of the pages written with the docs, page by page: none may go missing. (Other pages
may carry samples of their own; every sample of every page is compared below.)"""


def _commands(page: str) -> list[str]:
    text = (samples.ROOT / page).read_text()
    return [" ".join(run.args) for marker, _ in samples.samples(text) for run in samples.parse_runs(marker)]


@pytest.mark.parametrize("page", sorted(MARKED))
def test_each_page_has_its_samples_marked(page):
    assert _commands(page) == MARKED[page]


def test_every_document_is_searched_for_samples():
    found = {str(path.relative_to(samples.ROOT)) for path in samples.documents()}
    assert {*MARKED, "docs/architecture.md", "docs/reference/cli.md"} <= found
    assert not any(name.startswith("docs/hooks/") for name in found)


@pytest.mark.parametrize(("path", "marker", "body"), SAMPLES,
                         ids=[f"{path.name}:{marker.split('|')[0].strip()}" for path, marker, _ in SAMPLES])
def test_each_sample_has_the_structure_of_a_fresh_run(path, marker, body, shardscope_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(samples.COLUMNS))

    def run(command: samples.Run) -> tuple[str, int]:
        result = shardscope_cli(*command.args, cwd=samples.ROOT)
        assert result.returncode in (0, 1), f"shardscope {' '.join(command.args)}:\n{result.stderr}"
        return result.stdout, result.returncode

    fresh = samples.fresh_sample(marker, run)
    assert samples.structure(body) == samples.structure(fresh), f"run `make samples`; the fresh sample:\n{fresh}"


def test_the_structure_masks_only_what_varies_from_run_to_run():
    one = "│ run median │ 1.530 ms │ 0.989 ms │\n│ bytes per call │ 17,024 │ 1,344 │\ndeferred is 1.55x faster " \
          "than naive (median of 20 per-round ratios; 95% confidence interval 1.18-2.98x); max_abs_err 7.63e-05"
    other = "│ run median │ 12.1 s │ 0.343 ms │\n│ bytes per call │ 17,024 │ 1,344 │\nno measurable difference " \
            "between naive and deferred (median of 73 per-round ratios 1.02x; 95% confidence interval 0.93-1.12x); " \
            "max_abs_err 6.87e-05"
    assert samples.structure(one) == samples.structure(other)
    assert samples.structure(one.replace("17,024", "17,025")) != samples.structure(other)  # a byte count differs
    assert samples.structure("│ temp memory │ 54,728 B │") != samples.structure("│ memory/device: temporaries │ 54,728 B │")


def test_a_sample_is_rewritten_under_its_marker_only():
    text = "intro\n<!-- sample: demos -->\n```\nstale\n```\n\n```\nnot a sample\n```\n"
    assert samples.samples(text) == [("demos", "stale\n")]
    assert samples.rewrite(text, {"demos": "$ shardscope demos\nfresh\n"}) == \
        "intro\n<!-- sample: demos -->\n```\n$ shardscope demos\nfresh\n```\n\n```\nnot a sample\n```\n"
