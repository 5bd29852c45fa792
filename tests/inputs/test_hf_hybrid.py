"""HF configs of Nemotron-H / Nemotron 3 (planner.inputs.hf_hybrid) and GLM-4.7-Flash.

Oracles: the bundled models built from Megatron-LM's own configurations of the same checkpoints
(model_zoo/nemotron3-nano-30b-a3b.toml, nemotronh-56b.toml: every shape field equal, so every
parameter count equal), and the published totals: NVIDIA's Nemotron 3 Nano card (31.6B total,
3.6B active with the embeddings), the Nemotron-H 56B card (56B), Z.ai's GLM-4.7-Flash card
("30B-A3B", active without the embedding table and output layer); tolerances are the published
figures' rounding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import HF

from planner.inputs import catalog
from planner.inputs.errors import InputError
from planner.inputs.hf_import import load_hf_config
from planner.model import params

SHAPE = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "kv_channels",
    "vocab_size",
    "activation",
    "gated_linear_unit",
    "position_embedding_type",
    "untie_embeddings_and_output_weights",
    "hybrid_layer_pattern",
    "mamba_num_heads",
    "mamba_head_dim",
    "mamba_state_dim",
    "mamba_num_groups",
    "num_moe_experts",
    "moe_router_topk",
    "expert_ffn",  # moe_ffn_hidden_size, or ffn_hidden_size where the zoo leaves it out
    "moe_shared_expert_intermediate_size",
)


@pytest.mark.parametrize(
    ("fixture", "zoo"),
    [("nemotron-3-nano-30b-a3b", "nemotron3-nano-30b-a3b"), ("nemotron-h-56b", "nemotronh-56b")],
)
def test_nemotron_h_reads_as_megatrons_configuration(fixture: str, zoo: str) -> None:
    arch = load_hf_config(HF / f"{fixture}.json")
    own = catalog.resolve_model(zoo)
    assert {f: getattr(arch, f) for f in SHAPE} == {f: getattr(own, f) for f in SHAPE}
    assert params.params_total(arch) == params.params_total(own)
    assert params.params_active(arch) == params.params_active(own)


def test_published_totals() -> None:
    nano = load_hf_config(HF / "nemotron-3-nano-30b-a3b.json")
    assert params.params_total(nano) == pytest.approx(31.6e9, rel=0.002)
    assert params.params_active(nano) == pytest.approx(3.6e9, rel=0.014)
    assert params.params_total(load_hf_config(HF / "nemotron-h-56b.json")) == pytest.approx(
        56e9, rel=0.009
    )
    flash = load_hf_config(HF / "glm-4.7-flash.json")
    assert params.params_total(flash) == pytest.approx(30e9, rel=0.017)
    tables = 2 * flash.vocab_size * flash.hidden_size  # untied embedding and output layer
    assert 2.5e9 <= params.params_active(flash) - tables < 3.5e9  # "A3B"


def _write(tmp_path: Path, cfg: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_glm_flash_dense_layers_from_mlp_layer_types(tmp_path: Path) -> None:
    """transformers' Glm4MoeLiteConfig lists the dense layers in mlp_layer_types (default: the
    first); first_k_dense_replace, where given, says the same."""
    cfg = json.loads((HF / "glm-4.7-flash.json").read_text())
    del cfg["first_k_dense_replace"]
    cfg["mlp_layer_types"] = ["dense"] * 2 + ["sparse"] * 45
    arch = load_hf_config(_write(tmp_path, cfg))
    assert arch.moe_layer_freq == (0, 0) + (1,) * 45
    cfg["mlp_layer_types"] = ["sparse", "dense"] + ["sparse"] * 45
    with pytest.raises(InputError, match=r"config\.json: mlp_layer_types: must list"):
        load_hf_config(_write(tmp_path, cfg))


def test_nemotron_h_without_a_pattern_names_the_field(tmp_path: Path) -> None:
    cfg = json.loads((HF / "nemotron-h-56b.json").read_text())
    del cfg["hybrid_override_pattern"]
    with pytest.raises(InputError, match=r"config\.json: hybrid_override_pattern: required"):
        load_hf_config(_write(tmp_path, cfg))


def test_nemotron_3_super_reads_its_latent_moe_width(tmp_path: Path) -> None:
    """Nemotron 3 Super's shape as a NemotronH config.json (Nano's fields, the zoo entry's
    sizes), with moe_latent_size 1024 as Megatron-Bridge reads it (067f987d
    src/megatron/bridge/models/nemotronh/nemotron_h_bridge.py:320-321: provider.moe_latent_size
    = hf_config.moe_latent_size). Each routed expert then runs 1024 -> 2688 -> 1024 (squared
    ReLU, no GLU): 512 x 2 x 1024 x 2688 = 2,818,572,288 expert parameters a MoE layer, as the
    zoo entry (Megatron-LM's NVIDIA-Nemotron-3-Super-120B-A12B-BF16.sh) counts them, not
    512 x 2 x 4096 x 2688 at the hidden width."""
    zoo = catalog.get_model("nemotron3-super-120b-a12b")
    cfg = json.loads((HF / "nemotron-3-nano-30b-a3b.json").read_text())
    cfg.update(
        hidden_size=4096,
        num_hidden_layers=88,
        hybrid_override_pattern=zoo.hybrid_layer_pattern,
        mamba_num_heads=128,
        n_routed_experts=512,
        num_experts_per_tok=22,
        moe_intermediate_size=2688,
        intermediate_size=2688,
        moe_shared_expert_intermediate_size=5376,
        moe_latent_size=1024,
    )
    arch = load_hf_config(_write(tmp_path, cfg))
    assert arch.moe_latent_size == 1024
    experts = next(k for k in arch.kinds if k.moe)
    assert params.kind_params(arch, experts)[1] == 512 * 2 * 1024 * 2688
    assert params.params_total(arch) == params.params_total(zoo)
    # Nano's config says null (or nothing): experts at the hidden width
    assert load_hf_config(HF / "nemotron-3-nano-30b-a3b.json").moe_latent_size is None
