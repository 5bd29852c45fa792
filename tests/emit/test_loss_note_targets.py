"""The note `check` and `explain` give of the loss the Megatron-LM targets launch names only the
targets that launch the plan: a plan over pools is launched by megatron-args, torchrun and slurm
(`launch.POOL_TARGETS`); k8s refuses it ("cannot place pipeline ranks on pools"), so the note
must not name k8s there. The oracle is `launch --target k8s` itself, which exits 2."""

from __future__ import annotations

import re

import pytest
from cli_run import run
from paths import REPO

EXAMPLES = REPO / "examples"


def _note_targets(err: str) -> list[str]:
    m = re.search(r"note: launch --target (.+?) run Megatron-LM", err)
    assert m is not None, err
    return m.group(1).split(", ")


def test_pooled_plan_note_names_the_targets_that_launch_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = str(EXAMPLES / "pools-llama3.1-70b-h100-a100-plan.toml")
    code, _, err = run(["check", plan], capsys)
    assert code == 0
    named = _note_targets(err)
    for target in named:  # each named target writes the plan
        assert run(["launch", plan, "--target", target], capsys)[0] == 0
    assert run(["launch", plan, "--target", "k8s"], capsys)[0] == 2
    assert "k8s" not in named


def test_single_cluster_plan_note_names_every_megatron_lm_target(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(["check", str(EXAMPLES / "llama3.1-8b-h100.toml")], capsys)
    assert code == 0
    assert _note_targets(err) == ["megatron-args", "torchrun", "slurm", "k8s"]
