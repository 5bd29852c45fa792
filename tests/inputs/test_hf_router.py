"""HF config.json's router and MTP fields that the families share: scoring_func ->
moe_router_score_function and Qwen3.5 dense's mtp_num_hidden_layers -> mtp_num_layers.

Oracles: Megatron-Bridge 067f987d src/megatron/bridge/models/conversion/model_bridge.py:485
("scoring_func", "moe_router_score_function") and :498 ("mtp_num_hidden_layers",
"mtp_num_layers"), mapped for every model; the bridges that set the router of the families whose
config has no scoring_func: glm/glm45_bridge.py:74, glm/glm47_flash_bridge.py:85,
nemotronh/nemotron_h_bridge.py:311 (sigmoid); the fixtures' own scoring_func (deepseek-v3.json
from deepseek-ai/DeepSeek-V3, minimax-m2.7.json, deepseek-v2*.json "softmax": test_hf_import's
docstring names their sources); qwen_vl/qwen35_vl_bridge.py:365, the dense Qwen3.5 bridge
converting the MTP layer's weights (`_get_dense_mtp_mappings`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import EXAMPLES, HF

from planner.emit import megatron
from planner.inputs import catalog, megatron_args
from planner.inputs.errors import InputError
from planner.inputs.hf_import import load_hf_config
from planner.inputs.plan import load_plan

SCORE = {
    "deepseek-v3": "sigmoid",  # its config.json: scoring_func "sigmoid"
    "deepseek-v3.2-exp": "sigmoid",  # V3's fields
    "glm-5": "sigmoid",  # composed fixture: scoring_func "sigmoid"
    "minimax-m2.7": "sigmoid",  # its config.json: scoring_func "sigmoid"
    "glm4.5-355b-a32b": "sigmoid",  # no scoring_func: glm45_bridge.py:74
    "glm-4.7-flash": "sigmoid",  # no scoring_func: glm47_flash_bridge.py:85
    "nemotron-3-nano-30b-a3b": "sigmoid",  # no scoring_func: nemotron_h_bridge.py:311
    "deepseek-v2": "softmax",  # its config.json: scoring_func "softmax"
    "deepseek-v2-lite": "softmax",
    "mixtral-8x7b": "softmax",  # no scoring_func; Mixtral's softmax router
    "qwen3-30b-a3b": "softmax",
    "gpt-oss-120b": "softmax",  # Megatron-LM d98e8a64 .../openai/gpt-oss-120b.sh:32
}


@pytest.mark.parametrize("name", sorted(SCORE))
def test_router_score_function(name: str) -> None:
    assert load_hf_config(HF / f"{name}.json").moe_router_score_function == SCORE[name]


# zoo entries whose checkpoint is a fixture: the imported router is the zoo's
SAME_AS_ZOO = {
    "deepseek-v3": "deepseek-v3",
    "deepseek-v3.2-exp": "deepseek-v3.2",
    "glm-5": "glm-5",
    "glm4.5-355b-a32b": "glm4.5-355b-a32b",
    "nemotron-3-nano-30b-a3b": "nemotron3-nano-30b-a3b",
    "deepseek-v2": "deepseek-v2",
}


@pytest.mark.parametrize("name", sorted(SAME_AS_ZOO))
def test_zoo_router_matches_the_import(name: str) -> None:
    zoo = catalog.get_model(SAME_AS_ZOO[name])
    assert zoo.moe_router_score_function == SCORE[name]


def test_kimi_k2_zoo_router_is_sigmoid() -> None:
    # Megatron-LM d98e8a64 examples/post_training/modelopt/conf/moonshotai/Kimi-K2-Instruct.sh:33
    assert catalog.get_model("kimi-k2").moe_router_score_function == "sigmoid"


def _write(tmp_path: Path, cfg: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v2", "glm4.5-355b-a32b"])
def test_scoring_func_is_read_where_given(tmp_path: Path, name: str) -> None:
    cfg = json.loads((HF / f"{name}.json").read_text())
    for value in ("softmax", "sigmoid"):
        arch = load_hf_config(_write(tmp_path, {**cfg, "scoring_func": value}))
        assert arch.moe_router_score_function == value


@pytest.mark.parametrize("value", ["noaux_tc", 1])
def test_a_bad_scoring_func_names_file_field_and_value(tmp_path: Path, value: object) -> None:
    cfg = {**json.loads((HF / "deepseek-v3.json").read_text()), "scoring_func": value}
    path = _write(tmp_path, cfg)
    with pytest.raises(InputError) as err:
        load_hf_config(path)
    message = str(err.value)
    assert str(path) in message and "scoring_func" in message
    assert json.dumps(value) in message


def test_qwen3_5_dense_reads_its_mtp_layers(tmp_path: Path) -> None:
    # Qwen/Qwen3.6-27B's text_config: mtp_num_hidden_layers 1 -> one MTP layer, the last decoder
    # layer's kind (a full-attention dense layer: layer_types' last entry)
    arch = load_hf_config(HF / "qwen3.6-27b.json")
    assert arch.mtp_num_layers == 1
    assert [k.name for k in arch.mtp_kinds] == ["dense"]
    cfg = json.loads((HF / "qwen3.6-27b.json").read_text())
    text = {k: v for k, v in cfg["text_config"].items() if k != "mtp_num_hidden_layers"}
    assert load_hf_config(_write(tmp_path, {**cfg, "text_config": text})).mtp_num_layers == 0
    bad = {**cfg, "text_config": {**text, "mtp_num_hidden_layers": -1}}
    with pytest.raises(InputError, match="text_config: mtp_num_hidden_layers"):
        load_hf_config(_write(tmp_path, bad))


def test_deepseek_v3_launch_emits_and_check_reads_back_the_sigmoid_router() -> None:
    # the zoo's sigmoid -> --moe-router-score-function sigmoid (planner/emit/megatron_model.py
    # emits it where not Megatron's softmax default) -> read back by check --megatron-args
    text = megatron.render(load_plan(EXAMPLES / "deepseek-v3-h800.toml"), "job")
    assert "--moe-router-score-function sigmoid" in text
    doc = megatron_args.read(text, "h800-sxm-80gb", 2048, "job").doc
    assert doc["model"]["moe_router_score_function"] == "sigmoid"
