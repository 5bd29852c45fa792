"""HF config.json -> ModelArch for the families read from real configs since: sliding-window
layers, Qwen3.5's text_config, Qwen3-Next and MiniMax MTP layers, vendors' active-parameter
counts, Gemma 2, SmolLM3, Seed-OSS and Phi-3.

Oracles: the fixtures of tests/data/hf/ (their provenance in hf_fixtures.py); the model cards'
published counts and the transformers config classes' defaults named in the comments.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hf_fixtures import fixture, load_error, write
from paths import HF

from planner.inputs import catalog
from planner.inputs.errors import InputError
from planner.inputs.hf_import import arch_from_hf, load_hf_config
from planner.model import params


def test_sliding_window_layers() -> None:
    # gpt-oss: layer_types alternates, sliding first; sliding_window 128 -> Megatron's (127, 0)
    # with window_attn_skip_freq 2 (Megatron-Bridge gpt_oss_bridge.py:87-88 @067f987d); the zoo
    # entry says the same
    oss = load_hf_config(HF / "gpt-oss-120b.json")
    assert (oss.window_size, oss.window_attn_skip_freq) == (127, 2)
    zoo = catalog.get_model("gpt-oss-120b")
    assert (zoo.window_size, zoo.window_attn_skip_freq) == (127, 2)
    assert [oss.is_windowed(i) for i in range(4)] == [True, False, True, False]
    # Mistral 7B: sliding_window 4096 on every layer, no layer_types
    mistral = load_hf_config(HF / "mistral-7b.json")
    assert (mistral.window_size, mistral.window_attn_skip_freq) == (4095, None)
    # Qwen2.5 (use_sliding_window false) and Mixtral (null): none
    assert load_hf_config(HF / "qwen2.5-7b.json").window_size is None
    assert load_hf_config(HF / "mixtral-8x7b.json").window_size is None
    # an irregular pattern is kept as the 1 / 0 list; a wrong one is refused naming the field
    cfg = fixture("gpt-oss-120b")
    n = cfg["num_hidden_layers"]
    types = ["full_attention"] * 3 + ["sliding_attention"] * (n - 3)
    irregular = arch_from_hf({**cfg, "layer_types": types}, "x.json")
    assert irregular.window_attn_skip_freq == (0, 0, 0) + (1,) * (n - 3)
    with pytest.raises(InputError, match=r"x\.json: layer_types: must list"):
        arch_from_hf({**cfg, "layer_types": ["sliding_attention"]}, "x.json")


def test_qwen3_5_reads_its_text_config(tmp_path: Path) -> None:
    cfg = fixture("qwen3.5-9b")
    # the model's tie_word_embeddings stands where the text config has none
    tied = {**cfg, "tie_word_embeddings": True}
    assert not load_hf_config(write(tmp_path, tied)).untie_embeddings_and_output_weights
    # an error inside the language model names the file and text_config
    bad = {**cfg, "text_config": {**cfg["text_config"], "linear_num_key_heads": 0}}
    message = load_error(write(tmp_path, bad))
    assert "text_config: linear_num_key_heads" in message
    assert "text_config: must be an object" in load_error(
        write(tmp_path, {**cfg, "text_config": 3})
    )


def test_qwen3_next_mtp_layers(tmp_path: Path) -> None:
    # mtp_num_hidden_layers -> mtp_num_layers (Megatron-Bridge's mapping); the MTP layer is the
    # last decoder layer's kind, a full-attention MoE layer in Qwen3-Next
    cfg = {**fixture("qwen3-next-80b-a3b"), "mtp_num_hidden_layers": 1}
    arch = load_hf_config(write(tmp_path, cfg))
    assert arch.mtp_num_layers == 1
    assert [k.name for k in arch.mtp_kinds] == ["moe"]
    assert load_hf_config(HF / "qwen3-next-80b-a3b.json").mtp_num_layers == 0


# --- the families added from real configs (phi3, smollm3, seed_oss, gemma2, olmoe, granitemoe,
# minimax_m2)


def test_vendors_quoting_active_parameters_without_embeddings() -> None:
    """MiniMax's "230B total, 10B active" and IBM's 3B-A800M count the active parameters
    without the embedding table and the output layer (params_active counts both: the tables
    less); MTP modules are outside the total, as DeepSeek reports. Tolerances: the published
    figures' rounding (10B and 800M to their last digit, 5%; 230B and 3.3B, 1%)."""
    for name, total, active in (
        ("minimax-m2.7", 230e9, 10e9),
        ("granite-3.0-3b-a800m", 3.3e9, 0.8e9),
    ):
        arch = load_hf_config(HF / f"{name}.json")
        tables = (1 + arch.untie_embeddings_and_output_weights) * arch.vocab_size
        assert params.params_total(arch) == pytest.approx(total, rel=0.01), name
        non_embedding = params.params_active(arch) - tables * arch.hidden_size
        assert non_embedding == pytest.approx(active, rel=0.05), name


def test_minimax_lightning_attention_layers_are_refused(tmp_path: Path) -> None:
    """MiniMax-01's lightning (linear) attention, attn_type_list 0, has no model here."""
    cfg = fixture("minimax-m2.7")
    cfg["attn_type_list"] = [0] + [1] * 61
    message = load_error(write(tmp_path, cfg))
    assert "attn_type_list: only full attention (1 on each of the 62 layers)" in message


def test_minimax_mtp_only_where_used_and_partial_rope_noted() -> None:
    arch = load_hf_config(HF / "minimax-m2.7.json")
    assert "RoPE on 64 of 128 head dims (rotary_dim)" in arch.source
    off = arch_from_hf({**fixture("minimax-m2.7"), "use_mtp": False}, "x.json")
    assert off.mtp_num_layers == 0
    assert params.params_total(off) == params.params_total(arch)  # MTP is outside the total


def test_gemma2_layer_types_spelt_out_equal_the_default_alternation() -> None:
    """Gemma2Config's default: layer i slides where i + 1 is odd (i = 0, 2, ...): the same as
    the list spelt out, and with every layer sliding no skip frequency at all."""
    cfg = fixture("gemma-2-9b")
    types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(42)]
    assert arch_from_hf({**cfg, "layer_types": types}, "x.json") == arch_from_hf(cfg, "x.json")
    every = arch_from_hf({**cfg, "layer_types": ["sliding_attention"] * 42}, "x.json")
    assert (every.window_size, every.window_attn_skip_freq) == (4095, None)
    assert "soft-capping" in arch_from_hf(cfg, "x.json").source


def test_smollm3_window_only_where_used_and_seed_oss_out_bias() -> None:
    smol = fixture("smollm3-3b")
    assert arch_from_hf({**smol, "sliding_window": 4096}, "x.json").window_size is None
    on = arch_from_hf({**smol, "sliding_window": 4096, "use_sliding_window": True}, "x.json")
    assert on.window_size == 4095
    assert "no_rope_layers" in arch_from_hf(smol, "x.json").source
    # a fuzzer's string there was an internal error ('in <string>' with an int): it is a note
    assert arch_from_hf({**smol, "no_rope_layers": "full_attention"}, "x.json").num_layers == 36
    seed = arch_from_hf({**fixture("seed-oss-36b"), "attention_out_bias": True}, "x.json")
    assert (seed.add_bias_linear, seed.add_qkv_bias) == (True, False)


def test_phi3_partial_rope_is_noted() -> None:
    arch = arch_from_hf({**fixture("phi-4"), "partial_rotary_factor": 0.75}, "x.json")
    assert "RoPE on 0.75 of each head" in arch.source
