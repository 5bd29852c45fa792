"""HF configs of Llama 4 (planner.inputs.hf_llama4): Scout and Maverick's language models.

Oracle: hand arithmetic on the configs' shapes (below), which lands on Meta's published totals
(Scout 109B with its vision encoder, Maverick 400B; 17B active each) within the vision
encoder's share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import HF

from planner.inputs.errors import InputError
from planner.inputs.hf_import import load_hf_config
from planner.model import params

TABLES = 2 * 202_048 * 5_120  # untied embedding and output layer: 2,068,971,520
ATTENTION = 2 * 5_120 * 5_120 + 2 * 5_120 * 1_024  # q, o; k, v (8 x 128): 62,914,560
NORMS = 2 * 5_120  # a layer's two RMSNorms
EXPERT = 3 * 5_120 * 8_192  # gate, up, down: 125,829,120


def test_scout_by_hand() -> None:
    # every layer: 16 experts + the shared one + the router (5,120 x 16)
    layer = ATTENTION + NORMS + 17 * EXPERT + 5_120 * 16
    arch = load_hf_config(HF / "llama4-scout-17b-16e.json")
    assert params.params_total(arch) == 48 * layer + TABLES + 5_120 == 107_769_861_120
    # active: one routed expert and the shared one per layer (router included)
    active = 48 * (ATTENTION + NORMS + 2 * EXPERT + 5_120 * 16) + TABLES + 5_120
    assert params.params_active(arch) == active
    assert params.params_total(arch) == pytest.approx(109e9, rel=0.02)  # 109B with vision
    assert active == pytest.approx(17e9, rel=0.02)


def test_maverick_by_hand() -> None:
    # 24 MoE layers (128 experts, the shared one, the router) and 24 dense (a 16,384 MLP)
    moe = ATTENTION + NORMS + 129 * EXPERT + 5_120 * 128
    dense = ATTENTION + NORMS + 3 * 5_120 * 16_384
    arch = load_hf_config(HF / "llama4-maverick-17b-128e.json")
    assert params.params_total(arch) == 24 * (moe + dense) + TABLES + 5_120 == 400_711_848_960
    assert params.params_total(arch) == pytest.approx(400e9, rel=0.002)
    assert params.params_active(arch) == pytest.approx(17e9, rel=0.02)


def test_listed_moe_layers_and_a_bad_list(tmp_path: Path) -> None:
    cfg = json.loads((HF / "llama4-maverick-17b-128e.json").read_text())
    cfg["text_config"]["moe_layers"] = [0, 47]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert load_hf_config(path).moe_layer_freq == (1,) + (0,) * 46 + (1,)
    cfg["text_config"]["moe_layers"] = [48]
    path.write_text(json.dumps(cfg))
    with pytest.raises(InputError, match=r"text_config: moe_layers: must list layer indices"):
        load_hf_config(path)
