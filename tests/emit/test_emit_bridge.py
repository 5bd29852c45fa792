"""planner launch --target megatron-bridge: a Megatron-Bridge ConfigContainer override Bridge
accepts, carrying the layout, noting what has no switch and refusing what Bridge refuses.

Oracle: tests/data/megatron_bridge_config_schema.json (see bridge_schema.py) for every emitted
field and value; Megatron-Bridge 067f987d's sources named in each test.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from bridge_schema import accepted
from megatron_plans import make_plan
from paths import TESTS

from planner.emit.launch import render
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan

PLANS = sorted((TESTS / "data" / "plans").glob("launch-*.toml"))


@pytest.mark.parametrize("plan_path", PLANS, ids=lambda p: p.stem)
def test_bridge_accepts_the_override(plan_path: Path) -> None:
    accepted(yaml.safe_load(render(load_plan(plan_path), "megatron-bridge")[1]))


def test_muon_is_launched_as_bridges_muon() -> None:
    # Megatron-Bridge 067f987d training/optim.py:109 picks the layer-wise distributed optimizer by
    # "dist" in optimizer.optimizer; its Kimi K2 recipe then leaves ddp.use_distributed_optimizer
    # False (recipes/kimi/h100/kimi_k2.py:74), and its DDP wrap (models/model_provider.py:698-706)
    # passes no use_layer_wise_distributed_optimizer (default False, Megatron-LM 2a75ac12
    # training/models/dist_utils.py:270): the legacy whole-parameter path, which a plan prices
    # with muon_whole_params = true (Megatron-LM d98e8a64 core/optimizer/__init__.py:827-835)
    plan = make_plan(
        "llama3.1-8b",
        16,
        {"tp": 2},
        optimizer="muon",
        muon_ns_steps=6,
        muon_tp_mode="blockwise",
        muon_whole_params=True,
    )
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    accepted(doc)
    opt = doc["optimizer"]
    assert (opt["optimizer"], opt["muon_num_ns_steps"], opt["muon_tp_mode"]) == (
        "dist_muon",
        6,
        "blockwise",
    )
    assert opt["use_distributed_optimizer"] is False is doc["ddp"]["use_distributed_optimizer"]
    plain = make_plan("llama3.1-8b", 16, {"tp": 2, "zero_stage": 0}, optimizer="muon")
    assert yaml.safe_load(render(plain, "megatron-bridge")[1])["optimizer"]["optimizer"] == "muon"
    adam = yaml.safe_load(render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1])
    assert "optimizer" not in adam["optimizer"]


def test_bridge_refuses_muon_priced_on_the_layer_wise_layout() -> None:
    # the padded layer-wise layout (planner.model.muon_layout) needs DDP wrapped with
    # use_layer_wise_distributed_optimizer (Megatron-LM 2a75ac12 dist_utils.py:326-336), which
    # Bridge never passes (model_provider.py:698-706): refused, naming the field and both fixes
    layered = make_plan("llama3.1-8b", 16, {"tp": 2}, optimizer="muon")  # dp 8, zero_stage 1
    with pytest.raises(InputError, match=r"training\.muon_whole_params.*--target megatron-args"):
        render(layered, "megatron-bridge")
    # one data-parallel rank: no sharding, the two paths alike (layer_wise_optimizer.py at
    # 2a75ac12 `shard_params` :631-636 returns at dp_cp size 1), so launched as priced
    solo = make_plan("llama3.1-8b", 8, {"tp": 8}, optimizer="muon")
    assert yaml.safe_load(render(solo, "megatron-bridge")[1])["optimizer"]["optimizer"] == (
        "dist_muon"
    )


def test_the_override_carries_the_layout() -> None:
    # oracle: the plan file tests/data/plans/launch-llama3.1-70b.toml (tp 8, pp 4, vpp 5, mbs 1)
    plan = load_plan(TESTS / "data" / "plans" / "launch-llama3.1-70b.toml")
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    lay = plan.require_layout()
    m = doc["model"]
    assert (m["tensor_model_parallel_size"], m["pipeline_model_parallel_size"]) == (lay.tp, lay.pp)
    assert m["virtual_pipeline_model_parallel_size"] == lay.vpp
    assert doc["train"]["micro_batch_size"] == lay.micro_batch_size
    assert doc["ddp"]["use_distributed_optimizer"] is (lay.zero_stage >= 1)
    assert doc["comm_overlap"]["tp_comm_overlap"] is lay.tp_comm_overlap


def test_settings_without_a_megatron_switch_are_noted() -> None:
    # training.fused_norm = false (an unfused norm, timed so) has no Megatron-Core switch: the
    # override says so, as the Megatron-LM target does (planner.emit.megatron.unflagged)
    text = render(make_plan("llama3.1-8b", 16, {"tp": 2}, fused_norm=False), "megatron-bridge")[1]
    assert "# note: training.fused_norm = false has no Megatron flag" in text
    plain = render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1]
    assert "fused_norm" not in plain


def test_alibi_is_refused_for_bridge_naming_the_field() -> None:
    """BLOOM's ALiBi is no position embedding Megatron-Core builds (language_model_embedding.py
    d98e8a64: learned_absolute, rope or none), so no Bridge recipe trains it: the launch exits 2
    naming model.position_embedding_type, as megatron-args does; a rope model is written."""
    bloom = make_plan("bloom-176b", 64, {"tp": 8}, seq_length=2048)
    for target in ("megatron-bridge", "megatron-args"):
        with pytest.raises(InputError, match=r"model\.position_embedding_type: .*ALiBi"):
            render(bloom, target)
    accepted(yaml.safe_load(render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1]))


def test_deepep_on_grace_blackwell_is_refused_for_bridge() -> None:
    """Megatron-Bridge's config validation (flex_dispatcher_backend.py 067f987d) raises for
    DeepEP unless the GPU is Ampere / Hopper or named B200 / B300: GB200 and GB300 plans with it
    exit 2 naming the field; HybridEP there, and DeepEP on B200, are written."""
    par = {"ep": 8, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"}
    for gpu in ("gb200-nvl72", "gb300-nvl72"):
        with pytest.raises(InputError, match=r"parallel\.moe_flex_dispatcher_backend"):
            render(make_plan("qwen3-30b-a3b", 16, par, gpu=gpu), "megatron-bridge")
        hybrid = make_plan(
            "qwen3-30b-a3b", 16, {**par, "moe_flex_dispatcher_backend": "hybridep"}, gpu=gpu
        )
        accepted(yaml.safe_load(render(hybrid, "megatron-bridge")[1]))
    accepted(
        yaml.safe_load(
            render(make_plan("qwen3-30b-a3b", 16, par, gpu="b200-sxm-180gb"), "megatron-bridge")[1]
        )
    )


def test_hydra_overrides_paste_into_a_shell_as_one_word_each() -> None:
    """The header's Hydra overrides are shell-quoted: a list's spaces split it into words
    run_script.py's Hydra refuses (`model.recompute_modules=["core_attn", "mlp"]`), so each
    line reads back through shlex as one word, the override itself."""
    par = {"tp": 2, "pp": 1, "recompute": "selective", "recompute_modules": ["core_attn", "mlp"]}
    text = render(make_plan("llama3.1-8b", 16, par), "megatron-bridge")[1]
    line = next(ln for ln in text.splitlines() if "recompute_modules=" in ln)
    assert shlex.split(line[2:]) == ['model.recompute_modules=["core_attn", "mlp"]']


def test_a_layout_keeps_its_virtual_stages_and_the_dataset_its_length() -> None:
    """With a layout the override wrote vpp null: Bridge's EP-overlap setup asserts vpp set
    with pp > 1 before Megatron-Core derives it (comm_overlap.py), and null cleared a
    recipe's own; Megatron-Core takes an explicit vpp that matches the layout. The dataset's
    sequence length must equal the model's (ConfigContainer.validate asserts it): both set."""
    plan = load_plan(TESTS / "data" / "plans" / "launch-deepseek-v3.toml")  # pp 16 x vpp 2
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    assert doc["model"]["pipeline_model_parallel_layout"] is not None
    assert doc["model"]["virtual_pipeline_model_parallel_size"] == 2
    assert doc["dataset"]["seq_length"] == doc["model"]["seq_length"] == 4096


def test_test_mode_is_the_models_field() -> None:
    """training.test_mode -> model.test_mode (TransformerConfig.test_mode, Megatron-LM 2a75ac12
    transformer_config.py:274, the real-time attention checks the plan's step time counts);
    unset, no field (its default False)."""
    plan = make_plan("llama3.1-8b", 16, {"tp": 2}, test_mode=True)
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    accepted(doc)
    assert doc["model"]["test_mode"] is True
    plain = yaml.safe_load(render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1])
    assert "test_mode" not in plain["model"]
