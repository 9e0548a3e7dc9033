"""What the commands print on every shipped demo is what ``tests/fixtures/outputs/`` keeps
(``tests/_output_capture.py``): a change to how a plan is judged, costed or rendered shows every
output it alters, and changes none it does not mean to.

Each command runs in this process (8 CPU devices) and is compared with its capture, masked the
same way (times and the ratios measured from them; every count, byte, verdict, sentence, exit
status, error and model estimate kept). The capture is made with the reference JAX (0.10.2) and
the TPU and GPU compilers installed; elsewhere this skips. The deep demo runs at 6 layers (its
``SHARDSCOPE_DEEP_DEPTH``; 128 take minutes a command). After a change that alters an output
on purpose, rewrite the capture (``.venv/bin/python tests/_output_capture.py [NAME]``) and say in
the commit which outputs changed and why.
"""

from __future__ import annotations

import difflib
import json

import jax
import pytest

import _output_capture as capture
from _gpu_plugin import gpu_plugin_installed

pytestmark = pytest.mark.slow

COMMANDS = capture.commands()


def _skip_reason(command: capture.Command) -> str | None:
    if jax.__version__ != capture.JAX_VERSION:
        return f"the capture is jax {capture.JAX_VERSION}'s; this is {jax.__version__}"
    if "--target" in command.argv and not gpu_plugin_installed():
        return "JAX's CUDA plugin is not installed: the GPU target cannot be compiled for"
    return None


@pytest.mark.parametrize("command", COMMANDS, ids=[command.name for command in COMMANDS])
def test_the_command_prints_what_the_capture_holds(command, monkeypatch):
    reason = _skip_reason(command)
    if reason:
        pytest.skip(reason)
    monkeypatch.setenv("COLUMNS", str(capture.COLUMNS))
    fresh = capture.run(command)
    kept = capture.stored(command)
    assert fresh["returncode"] == kept["returncode"], f"{command.name}: exit status"
    assert fresh["stderr"] == kept["stderr"], f"{command.name}: stderr"
    assert fresh["stdout"] == kept["stdout"], (
        f"{command.name} prints other than its capture: rewrite it with `.venv/bin/python tests/_output_capture.py "
        f"{command.name}` if the change is meant, and say why in the commit\n" + _difference(kept["stdout"], fresh["stdout"]))


def _difference(kept: object, fresh: object) -> str:
    """The lines that differ (the JSON's, indented), kept first."""
    lines = [json.dumps(value, indent=1).splitlines() if not isinstance(value, str) else value.splitlines()
             for value in (kept, fresh)]
    return "\n".join(line for line in difflib.unified_diff(*lines, "kept", "fresh", lineterm="", n=1))[:6000]


def test_every_command_has_its_capture():
    assert sorted(path.stem for path in capture.STORE.glob("*.json")) == sorted(c.name for c in COMMANDS)


def test_the_masks_keep_what_is_modelled_and_hide_what_is_measured():
    one = ("│ compile for the target │ 0.447 s │ 0.090 s │\n│ step estimate │ 590 us to 598 us │ ~5.6 ms │\n"
           "reference (unchunked VJP): compile 0.313 s, run median 0.534 ms\n"
           "2 timed round(s) are too few to tell deferred from naive (median ratio 1.32x; time 3 or more).")
    other = one.replace("0.447", "12.1").replace("0.313", "4.616").replace("0.534", "4.391").replace("1.32x", "0.96x")
    assert capture.masked_text(one) == capture.masked_text(other)
    assert capture.masked_text(one) != capture.masked_text(one.replace("590 us", "591 us"))  # a model's estimate
    assert capture.masked_text("┃ a ┃   b ┃\n━━━━\n│ c │ d │") == "| a | b |\n| c | d |"
    data = {"compile_s": 1.5, "step_estimate": {"seconds": 2e-3}, "savings": [{"seconds_per_step": 1e-5}],
            "run_s": {"median": 1.0}, "exit_code": 1}
    assert capture.masked('{"compile_s": 9.0, "step_estimate": {"seconds": 2e-3}, "savings": [{"seconds_per_step": '
                          '1e-5}], "run_s": {"median": 3.0}, "exit_code": 1}', ("--json",)) == capture.masked_json(data)
