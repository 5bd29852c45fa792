"""A pooled plan's Megatron-LM arguments name no pool (QA Q3, a suspicion confirmed): every rank
gets the same command line, so `check --megatron-args` reads the file back as one GPU kind, and
its figures are not the header's (examples/pools-llama3.1-70b-h100-a100-plan.toml: header
6.375 s; read back 5.95 s with --gpu h100, 16.0 s with a100). The file says so.

Oracle: the round trip itself (the read-back's step is neither pool's header step) and the
header's note.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_run import run
from paths import REPO

PLAN = REPO / "examples" / "pools-llama3.1-70b-h100-a100-plan.toml"


@pytest.mark.parametrize("target", ["megatron-args", "slurm"])
def test_pooled_arguments_say_they_read_back_as_one_gpu_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    code, out, _ = run(["launch", str(PLAN), "--target", target], capsys)
    assert code == 0
    assert "cluster.pools have no Megatron-LM flag" in out  # before: no note
    if target != "megatron-args":
        return
    found = re.search(r"# predicted: step ([0-9.]+) s", out)
    assert found is not None
    args = tmp_path / "args.txt"
    args.write_text(out, encoding="utf-8")
    for gpu in ("h100-sxm-80gb", "a100-sxm-80gb"):
        cmd = ["check", "--megatron-args", str(args), "--gpu", gpu, "--num-gpus", "2048"]
        _, js, err = run([*cmd, "--json"], capsys)
        back = json.loads(js)["performance"]["step_time_s"]
        assert abs(back - float(found.group(1))) > 0.1, (gpu, err)  # why the note is there
