"""torchtitan's DeepSeek-V3 "16B" flavor is the zoo's deepseek-v2-lite: a plan of it runs EP under
torchtitan, its job config TOML and Python configuration are read, and both launch targets write
it and read back the same plan.

Oracles: the flavor's values as pytorch/torchtitan writes them, e347b1e5 models/deepseek_v3/
__init__.py:78-102 and b5bcd76c models/deepseek_v3/__init__.py:389-456 (dim 2048, inter_dim
10944, moe_inter_dim 1408, 27 layers, 1 dense, 16 heads, 64 experts, 2 shared, top 6, softmax,
q_lora_rank 0, kv_lora_rank 512, qk_nope 128, rope 64, v 128, vocab 102400, max_context_length
4096 x 4 at :428), the shared experts one FFN of moe_inter_dim x num_shared_experts
(b5bcd76c :260); b5bcd76c config_registry.py:141-173 (deepseek_v3_16b: expert_parallel_degree
8); torchtitan's MoE models run EP (the deepseek_v3 package is one).
"""

from __future__ import annotations

from pathlib import Path

from plan_text import write
from titan_module_check import check_module

from planner.emit import torchtitan as emit_toml
from planner.emit import torchtitan_module
from planner.inputs import catalog, torchtitan_config
from planner.inputs.plan import load_plan
from planner.inputs.torchtitan import HEAD_CONTEXT, MODELS, zoo_flavor
from planner.search.rules import check_plan

FLAVOR_16B = {
    "num_layers": 27,
    "hidden_size": 2048,
    "ffn_hidden_size": 10944,
    "num_attention_heads": 16,
    "vocab_size": 102400,
    "num_moe_experts": 64,
    "moe_router_topk": 6,
    "moe_router_score_function": "softmax",
    "moe_ffn_hidden_size": 1408,
    "moe_shared_expert_intermediate_size": 2 * 1408,
    "moe_layer_freq": (0,) + (1,) * 26,
    "multi_latent_attention": True,
    "q_lora_rank": None,  # q_lora_rank=0: a full-rank wq
    "kv_lora_rank": 512,
    "qk_head_dim": 128,
    "qk_pos_emb_head_dim": 64,
    "v_head_dim": 128,
    "moe_router_num_groups": None,
    "mtp_num_layers": 0,
    "untie_embeddings_and_output_weights": True,
}
"""The flavor's values (module docstring) as ModelArch fields."""

PLAN = (
    '[model]\nname = "deepseek-v2-lite"\n'
    '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
    '[training]\nframework = "torchtitan"\nseq_length = 4096\nglobal_batch_size = 8\n'
    '[parallel]\nep = 8\nmicro_batch_size = 1\nzero_stage = 3\nrecompute = "none"\n'
)

TOML_16B = """
[model]
name = "deepseek_v3"
flavor = "16B"
[training]
local_batch_size = 4
seq_len = 4096
[parallelism]
data_parallel_shard_degree = -1
expert_parallel_degree = 8
expert_tensor_parallel_degree = 1
[activation_checkpoint]
mode = "full"
"""
"""The parallelism of e347b1e5's deepseek_v3/train_configs/deepseek_v3_16b.toml, full
recompute."""


def test_the_zoo_entry_is_the_16b_flavor() -> None:
    arch = catalog.get_model("deepseek-v2-lite")
    assert {k: getattr(arch, k) for k in FLAVOR_16B} == FLAVOR_16B
    assert zoo_flavor(arch) == "deepseek-v2-lite"
    assert MODELS["deepseek-v2-lite"] == ("deepseek_v3", "16B")
    assert HEAD_CONTEXT["deepseek-v2-lite"] == 4096 * 4


def test_a_plan_runs_ep_8(tmp_path: Path) -> None:
    # config_registry.py:141-173 runs the flavor at expert_parallel_degree 8 on dp_shard 8
    lay = check_plan(load_plan(write(tmp_path, PLAN))).require_layout()
    assert (lay.dp, lay.ep, lay.expert_tp) == (8, 8, 1)


def test_the_torchtitan_toml_is_read(tmp_path: Path) -> None:
    path = write(tmp_path, TOML_16B, "ds16b.toml")
    plan = check_plan(torchtitan_config.load(path, "h100-sxm-80gb", 8))
    lay = plan.require_layout()
    assert plan.job.arch.name == "deepseek-v2-lite"
    assert (lay.dp, lay.ep, lay.expert_tp, lay.micro_batch_size) == (8, 8, 1, 4)


def test_both_targets_write_it_and_read_it_back(tmp_path: Path) -> None:
    plan = check_plan(load_plan(write(tmp_path, PLAN)))
    text = emit_toml.render(plan, "d1")
    assert 'name = "deepseek_v3"' in text and 'flavor = "16B"' in text
    module = torchtitan_module.render(plan, "d1")
    assert "deepseek_v3_16b()" in module
    check_module(module)
    for name, body in (("back.toml", text), ("planner_job.py", module)):
        back = check_plan(torchtitan_config.load(write(tmp_path, body, name), "h100-sxm-80gb", 8))
        assert back.job.arch.name == "deepseek-v2-lite"
        assert back.require_layout().describe() == plan.require_layout().describe()
