"""HF config.json -> ModelArch on bad input: always an InputError naming the file, and the
Hugging Face key and value at fault.

Oracles: the fixtures of tests/data/hf/ (their provenance in hf_fixtures.py), broken one field at a
time; the caps of planner.inputs.arch_fields.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hf_fixtures import fixture, load_error, write
from paths import HF

from planner.inputs.arch import ModelArch
from planner.inputs.arch_fields import MAX_EXPERTS, MAX_LAYERS
from planner.inputs.hf_import import SUPPORTED, load_hf_config

# --- errors: always InputError, always naming the file


def test_unknown_architecture_lists_supported(tmp_path: Path) -> None:
    path = write(tmp_path, {**fixture("llama3.1-8b"), "architectures": ["FalconForCausalLM"]})
    message = load_error(path)
    assert 'architectures: unsupported architecture "FalconForCausalLM"' in message
    for arch in SUPPORTED:
        assert arch in message


def test_unknown_model_type_without_architectures(tmp_path: Path) -> None:
    cfg = fixture("llama3.1-8b")
    del cfg["architectures"]
    cfg["model_type"] = "falcon"
    message = load_error(write(tmp_path, cfg))
    assert 'model_type: unsupported model_type "falcon"' in message
    assert "llama" in message


def test_missing_required_field(tmp_path: Path) -> None:
    cfg = fixture("llama3.1-8b")
    del cfg["hidden_size"]
    path = write(tmp_path, cfg)
    assert load_error(path) == f"{path}: hidden_size: required field missing for LlamaForCausalLM"


def test_missing_required_deepseek_field(tmp_path: Path) -> None:
    cfg = fixture("deepseek-v3")
    del cfg["kv_lora_rank"]
    assert "kv_lora_rank: required field missing" in load_error(write(tmp_path, cfg))


def test_json_past_what_the_decoder_reads_is_named(tmp_path: Path) -> None:
    """A fuzzer's configs: arrays nested 100,000 deep (RecursionError in json) and a 5,000-digit
    hidden_size (past Python's 4,300-digit int() limit) were internal errors."""
    deep = write(tmp_path, "[" * 100_000 + "]" * 100_000)
    assert load_error(deep) == f"{deep}: JSON nested too deep to read"
    cfg = fixture("llama3.1-8b")
    big = write(
        tmp_path, json.dumps(cfg).replace('"hidden_size": 4096', '"hidden_size": ' + "9" * 5000)
    )
    assert load_error(big).startswith(f"{big}: an integer of more than")


def test_routing_groups_the_experts_do_not_divide_are_the_configs(tmp_path: Path) -> None:
    """DeepSeek-V2-Lite's 64 experts in n_group 7: the model is refused where it is read
    (catalog show took it; check blamed a training field the plan did not have)."""
    cfg = fixture("deepseek-v2-lite")
    cfg.update(n_group=7, topk_group=3, topk_method="group_limited_greedy")
    message = load_error(write(tmp_path, cfg))
    assert "num_moe_experts (64) must be a multiple of moe_router_num_groups (7)" in message


def test_malformed_json_names_line(tmp_path: Path) -> None:
    path = write(tmp_path, '{\n  "hidden_size": 4096,\n  "vocab_size": \n}\n')
    message = load_error(path)
    assert "malformed JSON at line 4" in message


def test_json_that_is_not_an_object(tmp_path: Path) -> None:
    assert "expected a JSON object" in load_error(write(tmp_path, "[1, 2]"))


def test_path_that_does_not_exist(tmp_path: Path) -> None:
    assert "no such file" in load_error(tmp_path / "missing" / "config.json")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    assert "is a directory" in load_error(tmp_path)


@pytest.mark.parametrize(
    ("name", "field", "value"),
    [
        ("llama3.1-8b", "hidden_size", -4096),
        ("llama3.1-8b", "num_hidden_layers", 0),
        ("gpt2", "n_embd", -768),
        ("mixtral-8x7b", "num_local_experts", 0),
        ("qwen3-32b", "head_dim", "128"),
    ],
)
def test_bad_size_names_hf_field_and_value(
    tmp_path: Path, name: str, field: str, value: object
) -> None:
    path = write(tmp_path, {**fixture(name), field: value})
    message = load_error(path)
    assert message.startswith(f"{path}: {field}: must be a positive integer")
    assert f"(got {json.dumps(value)})" in message  # as config.json spells it


@pytest.mark.parametrize(
    ("name", "field", "cap"),
    [
        ("deepseek-v3", "num_hidden_layers", MAX_LAYERS),
        ("gpt2", "n_layer", MAX_LAYERS),
        ("mixtral-8x7b", "num_local_experts", MAX_EXPERTS),
    ],
)
def test_count_above_its_cap_is_bad_input(tmp_path: Path, name: str, field: str, cap: int) -> None:
    # 10^30 layers once built a per-layer MoE table (MemoryError, or every byte of the machine);
    # 10^12 experts stalled the search's walk over the expert-parallel degrees
    path = write(tmp_path, {**fixture(name), field: 10**30})
    message = load_error(path)
    assert message.startswith(f"{path}: {field}: must be at most {cap:,}")
    assert repr(10**30) in message
    # the cap itself is a count like any other
    assert load_hf_config(write(tmp_path, {**fixture(name), field: cap}, "at.json"))


def test_inconsistent_shape_names_megatron_fields(tmp_path: Path) -> None:
    path = write(tmp_path, {**fixture("llama3.1-8b"), "num_key_value_heads": 5})
    message = load_error(path)
    assert "num_attention_heads (32) must be a multiple of num_query_groups (5)" in message


def test_unsupported_activation(tmp_path: Path) -> None:
    path = write(tmp_path, {**fixture("gpt2"), "activation_function": "tanh"})
    assert 'activation_function: unsupported activation "tanh"' in load_error(path)


def test_result_is_a_model_arch() -> None:
    assert isinstance(load_hf_config(HF / "gpt2.json"), ModelArch)


def test_a_bad_value_is_named_by_its_config_key_too(tmp_path: Path) -> None:
    """ModelArch's rules speak of Megatron's fields; a config.json holds Hugging Face's keys:
    the message says which key each named field was read from (the rule itself: 32 heads in
    groups of 5 do not divide)."""
    cfg = {**fixture("llama3.1-8b"), "num_key_value_heads": 5}
    message = load_error(write(tmp_path, cfg))
    assert "num_attention_heads (32) must be a multiple of num_query_groups (5)" in message
    assert message.endswith("(in config.json: num_query_groups is num_key_value_heads)")
    dsv2 = fixture("deepseek-v2-lite")
    dsv2.update(n_group=7, topk_group=3, topk_method="group_limited_greedy")
    message = load_error(write(tmp_path, dsv2))
    assert "num_moe_experts is n_routed_experts, moe_router_num_groups is n_group" in message
