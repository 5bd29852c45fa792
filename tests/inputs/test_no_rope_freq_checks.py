"""ModelArch.no_rope_freq is refused where Megatron-LM asserts: d98e8a64
megatron/core/transformer/transformer_config.py:3140-3152 (an integer must divide num_layers,
a list must be num_layers long)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run

TINY = (
    'name = "tiny-llama4"\nnum_layers = 6\nhidden_size = 1024\nffn_hidden_size = 4096\n'
    "num_attention_heads = 16\nvocab_size = 32000\n"
)


def _err(tmp_path: Path, line: str, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY + line + "\n")
    code, _, err = run(["catalog", "show", str(path)], capsys)
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    return str(path), err


def test_freq_not_dividing_layers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 6 % 4 = 2: Megatron's `self.num_layers % self.no_rope_freq == 0` assert fails
    path, err = _err(tmp_path, "no_rope_freq = 4", capsys)
    assert path in err and "no_rope_freq (4) must divide num_layers (6)" in err


def test_list_of_wrong_length(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 4 entries for 6 layers: Megatron's `len(self.no_rope_freq) == self.num_layers` assert fails
    path, err = _err(tmp_path, "no_rope_freq = [0, 0, 0, 1]", capsys)
    assert path in err and "no_rope_freq has 4 entries but num_layers is 6" in err


@pytest.mark.parametrize("line", ["no_rope_freq = 3", "no_rope_freq = [0, 0, 1, 0, 0, 1]"])
def test_valid_values_accepted(
    tmp_path: Path, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY + line + "\n")
    code, _, err = run(["catalog", "show", str(path)], capsys)
    assert code == 0, err
