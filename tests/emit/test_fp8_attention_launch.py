"""A plan with FP8 attention launched by a Megatron-LM target: Megatron-LM d98e8a64 has no flag
for it (TransformerConfig.fp8_dot_product_attention is in arguments.py:2333's list of fields left
out of its command line), so the launched job runs bf16 attention. The oracle is planner's own
read-back: the file's header must predict what `check --megatron-args` reads from that file (the
header said the FP8-attention step, 3.224 s, where the file reads back at 3.565 s)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_run import run
from paths import REPO

RECIPE = REPO / "examples" / "recipes" / "llama3-8b-pretrain-8gpu-gb200-nvfp4.toml"


def test_the_header_predicts_the_bf16_attention_the_file_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "fp8_attention = true" in RECIPE.read_text(encoding="utf-8")
    code, out, _ = run(["launch", str(RECIPE), "--target", "megatron-args"], capsys)
    assert code == 0
    header = re.search(r"# predicted: step ([0-9.]+) s", out)
    assert header is not None
    assert "fp8_attention = true has no Megatron-LM flag" in out
    args = tmp_path / "args.txt"
    args.write_text(out, encoding="utf-8")
    code, js, _ = run(
        [
            "check",
            "--megatron-args",
            str(args),
            "--gpu",
            "gb200-nvl72",
            "--num-gpus",
            "8",
            "--json",
        ],
        capsys,
    )
    read_back = json.loads(js)["performance"]["step_time_s"]
    assert float(header.group(1)) == pytest.approx(read_back, abs=5e-4)
    # and check's note says both changes, with the launched step
    _, _, err = run(["check", str(RECIPE)], capsys)
    assert "has no flag for FP8 attention" in err
    assert f"predicted step {float(header.group(1)):.3f} s" in err
    assert "training.fp8_attention = false" in err
