"""planner launch for a deterministic torchtitan plan: `[torchtitan] deterministic_fill` says
whether PyTorch's NaN fill of empty tensors runs (planner.model.determinism charges it), which
is not a torchtitan key but its era's behaviour, so each target writes only the plans its
torchtitan runs as planned and refuses the others naming the field and value (exit 2).

Oracles: torchtitan e347b1e5 distributed/utils.py:114-124 (debug.deterministic calls
torch.use_deterministic_algorithms and leaves torch.utils.deterministic.fill_uninitialized_memory
on: no key turns it off); b5bcd76c distributed/utils.py:201-206 (sets it False, added by
da38566d, 2026-05-21, after the Python configurations came in 9810191b: no field keeps it on).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run
from plan_text import plan_text, write
from titan_toml_plans import TITAN

from planner.emit.launch import launch
from planner.inputs.errors import InputError


def _plan(tmp_path: Path, fill: bool | None) -> Path:
    extra = "" if fill is None else f"\n[torchtitan]\ndeterministic_fill = {str(fill).lower()}\n"
    text = plan_text(
        model='[model]\nname = "llama3.1-8b"\n',
        training=TITAN + "deterministic = true\n",
        parallel="[parallel]\nzero_stage = 3\n",
    )
    return write(tmp_path, text + extra)


def test_the_toml_target_writes_only_the_filling_era(tmp_path: Path) -> None:
    # deterministic_fill's default (false) is b5bcd76c's: e347b1e5 would fill regardless
    for fill in (None, False):
        with pytest.raises(InputError, match=r"torchtitan\.deterministic_fill: false .*e347b1e5"):
            launch(_plan(tmp_path, fill), "torchtitan")
    text = launch(_plan(tmp_path, True), "torchtitan").text
    assert "deterministic = true" in text


def test_the_module_target_writes_only_the_unfilled_era(tmp_path: Path) -> None:
    # a sentence naming the field, its value and why: b5bcd76c turns the fill off
    with pytest.raises(InputError) as info:
        launch(_plan(tmp_path, True), "torchtitan-module")
    said = str(info.value)
    assert ": torchtitan.deterministic_fill: true with training.deterministic: torchtitan " in said
    assert "b5bcd76c's debug.deterministic turns PyTorch's NaN fill of empty tensors off" in said
    text = launch(_plan(tmp_path, False), "torchtitan-module").text
    assert "config.debug.deterministic = True" in text


def test_the_cli_exits_2_naming_the_field_and_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["launch", str(_plan(tmp_path, None)), "--target", "torchtitan"], capsys)
    assert code == 2
    assert "torchtitan.deterministic_fill: false" in err and "Traceback" not in err
