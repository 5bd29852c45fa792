"""HF config.json import: what a QA pass found dropped or defaulted unlike transformers.

Oracles: transformers' config classes and modeling code at 008e5743 (the commit
planner.inputs.hf_qwen cites): MixtralAttention passes sliding_window=config.sliding_window to
every layer; Qwen2Config / Qwen3Config __post_init__ set sliding_window to None unless
use_sliding_window, then derive layer_types, layer i "sliding_attention" where
i >= max_window_layers (default 28); Qwen3MoeAttention takes self.sliding_window =
config.sliding_window on every layer and head_dim = getattr(config, "head_dim", hidden_size //
num_attention_heads) (Qwen3MoeConfig has no head_dim); Qwen2MoeConfig's
shared_expert_intermediate_size defaults to 5632 and its derived layer_types (the even layers
below max_window_layers) are not Qwen2's; DbrxAttentionConfig's kv_n_heads defaults to 1. HF
sliding_window w is Megatron's window_size w - 1 (Megatron-Bridge models/conversion/utils.py
mcore_to_hf_window_size @067f987d). The configs are the published fixtures of
tests/data/hf (see test_hf_import.py) with the keys each test names changed;
tests/data/hf/variants/mixtral-8x7b-swa4096.json is mixtral-8x7b.json with sliding_window 4096
(Mistral 7B's window) for null.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_run import run
from paths import HF

from planner.inputs.errors import InputError
from planner.inputs.hf_import import arch_from_hf, load_hf_config


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HF / f"{name}.json").read_text())
    return data


def write(tmp_path: Path, cfg: dict[str, Any], name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


def windowed(cfg: dict[str, Any]) -> list[bool]:
    arch = arch_from_hf(cfg, "x.json")
    return [arch.is_windowed(i) for i in range(arch.num_layers)]


# --- Mixtral: sliding_window on every layer, as Mistral's


def test_mixtral_sliding_window_on_every_layer() -> None:
    swa = load_hf_config(HF / "variants" / "mixtral-8x7b-swa4096.json")
    # HF 4096 -> Megatron 4095, on all 32 layers (no skip frequency)
    assert (swa.window_size, swa.window_attn_skip_freq) == (4095, None)
    assert all(swa.is_windowed(i) for i in range(32))
    # the window is all that differs from the published config (sliding_window null: none)
    plain = load_hf_config(HF / "mixtral-8x7b.json")
    assert plain.window_size is None
    ignore = {"name", "source", "window_size"}
    assert swa.model_dump(exclude=ignore) == plain.model_dump(exclude=ignore)


# --- the Qwen families: the window only where use_sliding_window


@pytest.mark.parametrize("name", ["qwen2.5-7b", "qwen3-32b", "qwen3-30b-a3b", "qwen1.5-moe-a2.7b"])
def test_qwen_published_configs_have_no_window(name: str) -> None:
    # every published config says use_sliding_window false: sliding_window (131072, 32768 or
    # null) is then None in the config class
    assert fixture(name)["use_sliding_window"] is False
    assert load_hf_config(HF / f"{name}.json").window_size is None


def test_qwen2_window_on_the_layers_from_max_window_layers() -> None:
    cfg = {**fixture("qwen2.5-7b"), "use_sliding_window": True, "sliding_window": 4096}
    # 28 layers, max_window_layers 14: layers 14..27 slide
    cfg["max_window_layers"] = 14
    assert windowed(cfg) == [i >= 14 for i in range(28)]
    assert arch_from_hf(cfg, "x.json").window_size == 4095
    # without max_window_layers, Qwen2Config's 28: no layer of 28 has i >= 28, so none slides
    del cfg["max_window_layers"]
    assert arch_from_hf(cfg, "x.json").window_size is None
    # layer_types, where given, say which (here every third layer full)
    types = ["full_attention" if i % 3 == 2 else "sliding_attention" for i in range(28)]
    assert windowed({**cfg, "layer_types": types}) == [i % 3 != 2 for i in range(28)]


def test_qwen3_window_defaults_and_null() -> None:
    cfg = {**fixture("qwen3-32b"), "use_sliding_window": True, "max_window_layers": 32}
    # sliding_window absent: Qwen3Config's 4096 -> 4095, on layers 32..63 of 64
    del cfg["sliding_window"]
    arch = arch_from_hf(cfg, "x.json")
    assert arch.window_size == 4095
    assert [arch.is_windowed(i) for i in range(64)] == [i >= 32 for i in range(64)]
    # sliding_window null: no window even with use_sliding_window
    assert arch_from_hf({**cfg, "sliding_window": None}, "x.json").window_size is None


def test_qwen3_moe_window_on_every_layer() -> None:
    # Qwen3MoeAttention ignores max_window_layers: all 48 layers slide
    cfg = {**fixture("qwen3-30b-a3b"), "use_sliding_window": True, "sliding_window": 4096}
    cfg["max_window_layers"] = 24
    arch = arch_from_hf(cfg, "x.json")
    assert (arch.window_size, arch.window_attn_skip_freq) == (4095, None)
    assert windowed(cfg) == [True] * 48


def test_qwen2_moe_window_needs_layer_types(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = {**fixture("qwen1.5-moe-a2.7b"), "use_sliding_window": True}
    path = write(tmp_path, cfg)
    with pytest.raises(InputError) as err:
        load_hf_config(path)
    message = str(err.value)
    assert message.startswith(f"{path}: use_sliding_window: true without layer_types")
    assert message.endswith("(got true)")
    # at the command line: exit 2 with the message, no traceback
    code, _, out = run(["catalog", "show", str(path)], capsys)
    assert code == 2 and "use_sliding_window" in out and "Traceback" not in out
    # layer_types given: those layers (the first 12 of 24 here), 32768 -> 32767
    types = ["sliding_attention"] * 12 + ["full_attention"] * 12
    arch = arch_from_hf({**cfg, "layer_types": types}, "x.json")
    assert arch.window_size == 32767
    assert [arch.is_windowed(i) for i in range(24)] == [i < 12 for i in range(24)]


# --- absent keys take transformers' defaults (the published configs all give them)


def test_qwen3_moe_head_dim_absent_is_hidden_over_heads() -> None:
    cfg = fixture("qwen3-30b-a3b")
    assert cfg["head_dim"] == 128  # published: kept
    assert load_hf_config(HF / "qwen3-30b-a3b.json").kv_channels == 128
    del cfg["head_dim"]
    # Qwen3MoeAttention: getattr(config, "head_dim", 2048 // 32) = 64, not Qwen3Config's 128
    assert arch_from_hf(cfg, "x.json").kv_channels == 2048 // 32 == 64


def test_qwen2_moe_shared_expert_absent_is_5632() -> None:
    cfg = fixture("qwen1.5-moe-a2.7b")
    assert cfg["shared_expert_intermediate_size"] == 5632  # published: Qwen2MoeConfig's default
    published = load_hf_config(HF / "qwen1.5-moe-a2.7b.json")
    del cfg["shared_expert_intermediate_size"]
    absent = arch_from_hf(cfg, HF / "qwen1.5-moe-a2.7b.json")
    assert absent.moe_shared_expert_intermediate_size == 5632
    assert absent == published


def test_dbrx_kv_n_heads_absent_is_one() -> None:
    cfg = fixture("dbrx-instruct")
    assert cfg["attn_config"]["kv_n_heads"] == 8  # published: 8 KV heads of 48
    assert load_hf_config(HF / "dbrx-instruct.json").num_query_groups == 8
    del cfg["attn_config"]["kv_n_heads"]
    # DbrxAttentionConfig(kv_n_heads=1): one KV head (MQA), not n_heads
    assert arch_from_hf(cfg, "x.json").num_query_groups == 1


# --- a required key given as null is named with its value


def test_required_key_null_names_the_value(tmp_path: Path) -> None:
    path = write(tmp_path, {**fixture("llama3.1-8b"), "hidden_size": None})
    with pytest.raises(InputError) as err:
        load_hf_config(path)
    assert str(err.value) == f"{path}: hidden_size: null (got null); required for LlamaForCausalLM"
    # an alias's key null with no other given: the null key, and the aliases
    gpt2 = write(tmp_path, {**fixture("gpt2"), "n_embd": None}, "gpt2.json")
    with pytest.raises(InputError) as err:
        load_hf_config(gpt2)
    assert str(err.value) == (
        f"{gpt2}: n_embd: null (got null); required for GPT2LMHeadModel "
        "(also accepted: hidden_size)"
    )
    # absent, as before: "required field missing"
    cfg = fixture("llama3.1-8b")
    del cfg["hidden_size"]
    missing = write(tmp_path, cfg, "missing.json")
    with pytest.raises(InputError, match="hidden_size: required field missing"):
        load_hf_config(missing)
