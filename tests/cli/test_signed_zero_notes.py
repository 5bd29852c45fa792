"""explain's signed changes never print a negative zero. QA: the bf16 layers of recipe
gpt-oss-20b-pretrain-64gpu-b300-nvfp4 run 0.06 ms a step faster than in NVFP4 (the model's own
`added`, checked below), and explain printed "adding -0.000 s".

Oracles: Python's formatting (f"{-0.00006:.3f}" is "-0.000"; a change rounded to the printed
decimals and added to 0.0 loses the sign of a zero), hand-written expected sentences, and the
model's own step difference for the recipe.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from cli_run import run
from paths import REPO

from planner.cli import explain_notes, switch_notes
from planner.inputs import units
from planner.inputs.plan import load_plan
from planner.model import cost

RECIPE = REPO / "examples" / "recipes" / "gpt-oss-20b-pretrain-64gpu-b300-nvfp4.toml"


def test_the_recipes_bf16_layers_add_nothing_printed_unsigned(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = load_plan(RECIPE)
    job, lay = plan.job, plan.require_layout()
    perf = cost.estimate(job, lay)
    extra = switch_notes.added(perf, replace(job, bf16_layers_at_end=0), lay)
    assert -0.0005 < extra < 0  # faster in bf16, by less than the thousandth printed
    assert f"{extra:.3f}" == "-0.000"  # what was printed
    text = explain_notes.bf16_layers_text(job, lay, perf)
    assert text is not None and f"adding 0.000 s to the {perf.step_time_s:.3f} s step" in text
    code, out, err = run(["explain", str(RECIPE)], capsys)
    assert code == 0, err
    assert "-0.000" not in out and "-0.0%" not in out


def test_change_text_by_hand() -> None:
    # a change that rounds away: 0.000, unsigned, whichever its sign
    assert switch_notes.change_text(-0.00006, 0.183) == "adding 0.000 s to the 0.183 s step"
    assert switch_notes.change_text(0.0004, 0.183) == "adding 0.000 s to the 0.183 s step"
    # one that saves a printed amount says so: 0.0123 s of 1.5 s is 0.8%, shown as 1%
    assert (
        switch_notes.change_text(-0.0123, 1.5, "add", "save", share=True)
        == "save 0.012 s of the 1.500 s step (1%)"
    )
    assert (
        switch_notes.change_text(0.25, 2.0, "adds", "saves", share=True)
        == "adds 0.250 s to the 2.000 s step (12%)"  # 0.125 to 2 decimals is 0.12
    )


def test_shown_drops_the_sign_of_a_zero() -> None:
    assert f"{units.shown(-0.0004, 3):.3f}" == "0.000"
    assert f"{units.shown(-0.0004, 3):+.1%}" == "+0.0%"
    assert f"{units.shown(-0.0006, 3):.3f}" == "-0.001"
    assert units.shown(2.5e-4, 3) == 0.0 and units.shown(-0.4, 0) == 0.0
