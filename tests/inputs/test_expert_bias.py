"""The router's expert bias (aux-loss-free load balancing): ModelArch.moe_router_enable_expert_bias,
read from Megatron lines, HF configs and the zoo, written by the megatron-args launch, validated.

Oracles:
- Megatron-LM d98e8a64 megatron/core/transformer/transformer_config.py:816 (the field, default
  False) and :2617-2625 (a ValueError unless the score function is sigmoid or sqrtsoftplus);
  megatron/core/transformer MoE router.py:180-195 (the E-sized fp32 buffers it adds);
- Megatron-Bridge 067f987d, the bridges that set it for the fixtures' families:
  deepseek/deepseek_v3_bridge.py:74, glm/glm45_bridge.py:76, glm/glm47_flash_bridge.py:86,
  glm_moe_dsa/glm5_bridge.py:103, kimi/kimi_bridge.py:62, minimax_m2/minimax_m2_bridge.py:168,
  nemotronh/nemotron_h_bridge.py:312; deepseek/deepseek_v2_bridge.py sets none (softmax);
- the zoo's sigmoid routers' own launches: Megatron-LM d98e8a64
  examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh:102, examples/post_training/modelopt/conf/
  moonshotai/Kimi-K2-Instruct.sh:35, .../nvidia/NVIDIA-Nemotron-3-{Nano,Super,Ultra}-*.sh:26-28.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import EXAMPLES, HF

from planner.emit import megatron
from planner.inputs import catalog, megatron_args
from planner.inputs.errors import InputError
from planner.inputs.hf_import import load_hf_config
from planner.inputs.plan import load_plan, parse_plan
from tests.emit.megatron_plans import flags, make_plan, round_trip
from tests.inputs.test_megatron_args import LLAMA3_8B

BIAS = {
    "deepseek-v3": True,  # deepseek_v3_bridge.py:74 (config topk_method "noaux_tc")
    "deepseek-v3.2-exp": True,  # V3's fields and bridge
    "glm-5": True,  # glm5_bridge.py:103
    "glm4.5-355b-a32b": True,  # glm45_bridge.py:76
    "glm-4.7-flash": True,  # glm47_flash_bridge.py:86
    "minimax-m2.7": True,  # minimax_m2_bridge.py:168
    "nemotron-3-nano-30b-a3b": True,  # nemotron_h_bridge.py:312
    "deepseek-v2": False,  # softmax; deepseek_v2_bridge.py sets none
    "deepseek-v2-lite": False,
    "mixtral-8x7b": False,
    "qwen3-30b-a3b": False,
    "gpt-oss-120b": False,
    "nemotron-h-56b": False,  # no experts
}

ZOO_BIASED = {
    "deepseek-v3",
    "deepseek-v3.2",
    "kimi-k2",
    "glm-5",
    "glm4.5-355b-a32b",
    "glm4.5-air-106b-a12b",
    "nemotron3-nano-30b-a3b",
    "nemotron3-super-120b-a12b",
    "nemotron3-ultra-550b-a55b",
    # torchtitan e347b1e5's Llama 4 flavors: sigmoid scores (moe.py:27) and the expert bias its
    # load_balance_coeff 1e-3 keeps (moe.py:38, :456-463)
    "llama4-17bx16e-titan",
    "llama4-17bx128e-titan",
}


@pytest.mark.parametrize("name", sorted(BIAS))
def test_hf_import_follows_the_bridges(name: str) -> None:
    assert load_hf_config(HF / f"{name}.json").moe_router_enable_expert_bias is BIAS[name]


def _write(tmp_path: Path, cfg: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_deepseek_v3_without_noaux_tc_has_no_bias(tmp_path: Path) -> None:
    # DeepSeek's MoEGate keeps e_score_correction_bias only under topk_method "noaux_tc"
    cfg = json.loads((HF / "deepseek-v3.json").read_text())
    assert not load_hf_config(
        _write(tmp_path, {**cfg, "topk_method": "greedy"})
    ).moe_router_enable_expert_bias
    absent = {k: v for k, v in cfg.items() if k != "topk_method"}
    assert load_hf_config(_write(tmp_path, absent)).moe_router_enable_expert_bias


def test_a_softmax_scoring_func_drops_the_bias(tmp_path: Path) -> None:
    # Megatron refuses the bias beside softmax (transformer_config.py:2617-2625)
    cfg = json.loads((HF / "glm4.5-355b-a32b.json").read_text())
    arch = load_hf_config(_write(tmp_path, {**cfg, "scoring_func": "softmax"}))
    assert arch.moe_router_score_function == "softmax"
    assert not arch.moe_router_enable_expert_bias


def test_zoo_sigmoid_routers_learn_the_bias() -> None:
    for name, arch in catalog.models().items():
        assert arch.moe_router_enable_expert_bias is (name in ZOO_BIASED), name
        # every zoo'd sigmoid router trains with it (HF Llama 4's top-1 is imported, not zoo'd)
        assert (arch.moe_router_score_function == "sigmoid") is (name in ZOO_BIASED), name


def test_megatron_line_reads_the_flag_and_accepts_the_rate() -> None:
    moe = (
        "--num-experts 8 --moe-router-topk 2 --moe-router-score-function sigmoid "
        "--moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-3"
    )
    reading = megatron_args.read(LLAMA3_8B.replace("--bf16", f"--bf16 {moe}"), "h100-sxm-80gb", 8)
    assert reading.doc["model"]["moe_router_enable_expert_bias"] is True
    assert "--moe-router-enable-expert-bias" not in reading.ignored
    without = moe.replace("--moe-router-enable-expert-bias ", "")
    reading = megatron_args.read(
        LLAMA3_8B.replace("--bf16", f"--bf16 {without}"), "h100-sxm-80gb", 8
    )
    assert "moe_router_enable_expert_bias" not in reading.doc["model"]


def test_megatron_line_with_softmax_is_refused() -> None:
    # Megatron raises for the flag beside the default softmax router, MoE or not
    moe = "--num-experts 8 --moe-router-topk 2 --moe-router-enable-expert-bias"
    doc = megatron_args.to_plan(LLAMA3_8B.replace("--bf16", f"--bf16 {moe}"), "h100-sxm-80gb", 8)
    with pytest.raises(InputError, match=r"moe_router_enable_expert_bias: .*\(got \"softmax\"\)"):
        parse_plan(doc)


def test_deepseek_v3_launch_writes_the_flag_and_check_reads_it_back() -> None:
    plan = load_plan(EXAMPLES / "deepseek-v3-h800.toml")
    text = megatron.render(plan, "job")
    assert "--moe-router-enable-expert-bias" in text
    doc = megatron_args.read(text, "h800-sxm-80gb", 2048, "job").doc
    assert doc["model"]["moe_router_enable_expert_bias"] is True


def test_round_trip_and_no_flag_without_the_bias() -> None:
    qwen = catalog.get_model("qwen3-30b-a3b")
    model = {
        **qwen.model_dump(exclude={"name"}),
        "name": "biased",
        "moe_router_score_function": "sigmoid",
        "moe_router_enable_expert_bias": True,
    }
    plan = make_plan(model, 8, {"ep": 8})
    assert flags(plan)["--moe-router-enable-expert-bias"] == []
    assert round_trip(plan).job.arch.moe_router_enable_expert_bias
    assert "--moe-router-enable-expert-bias" not in flags(make_plan("qwen3-30b-a3b", 8, {"ep": 8}))


TINY = """
name = "bad"
num_layers = 2
hidden_size = 256
ffn_hidden_size = 512
num_attention_heads = 4
vocab_size = 1000
moe_router_enable_expert_bias = true
"""
PLAN_REST = """
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 8
[training]
seq_length = 1024
global_batch_size = 8
[parallel]
tp = 1
"""


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        # a MoE with Megatron's default softmax router: transformer_config.py:2617-2625
        ("num_moe_experts = 4\nmoe_router_topk = 2\n", 'sqrtsoftplus" (got "softmax")'),
        ('num_moe_experts = 4\nmoe_router_score_function = "softmax"\n', '(got "softmax")'),
        ("", "no experts"),  # a dense model: no router to bias
    ],
)
def test_a_plan_file_names_file_field_and_value(tmp_path: Path, extra: str, why: str) -> None:
    path = tmp_path / "plan.toml"
    path.write_text("[model]" + TINY + extra + PLAN_REST)
    with pytest.raises(InputError) as err:
        load_plan(path)
    message = str(err.value)
    assert f"{path}: model.moe_router_enable_expert_bias: " in message
    assert why in message and message.endswith("(got true)")


def test_sigmoid_and_sqrtsoftplus_take_it(tmp_path: Path) -> None:
    for score in ("sigmoid", "sqrtsoftplus"):
        path = tmp_path / "plan.toml"
        extra = f'num_moe_experts = 4\nmoe_router_score_function = "{score}"\n'
        path.write_text("[model]" + TINY + extra + PLAN_REST)
        assert load_plan(path).job.arch.moe_router_enable_expert_bias
