"""gpt-oss's clamped GLU and attention sinks: what they keep for the backward.

Oracles:
- Megatron-LM d98e8a64: experts.py:973-980 (TEGroupedMLP's fused path calls
  weighted_bias_quick_geglu_impl for quick_gelu), fused_bias_geglu.py:424-432 (the clamp runs
  outside the autograd Function: chunk, two clamps, cat) and :327 (the Function saves its
  input, the clamped cat); fused_bias_swiglu.py:275 (WeightedSwiGLUFunction clamps inside);
  experts.py:998-1010 (the unfused GLU); transformer_config.py:231, :235 (the two fields),
  :2440 (a nonzero glu_linear_offset under bias_activation_fusion needs quick_gelu).
- torch derivatives.yaml `clamp`: the backward reads `self` (the clamp's input is saved).
- Megatron-Bridge 067f987d gpt_oss_bridge.py:66, :73, :82-84 (grouped GEMM, bias_activation_fusion,
  quick_gelu, clamp 7.0, offset 1.0).
- torchtitan e347b1e5 models/gpt_oss/model/moe.py:86-93 (eager swiglu: clamps, sigmoid, two
  products), model/model.py:241-255 (output * sigmoid(lse - sinks), then a contiguous copy for
  wo). Hand arithmetic in each test: gpt-oss-20b, F = 2880, 64 heads of 64, T = 4096, top-4,
  routing load 1 (16,384 pairs)."""

from __future__ import annotations

import json

import pytest
from jobs import TINY_LINE
from paths import HF

from planner.inputs import catalog, megatron_args
from planner.inputs.errors import InputError
from planner.inputs.hf_import import arch_from_hf
from planner.model.activations import attention_bytes
from planner.model.moe_activations import moe_bytes
from planner.model.shard import Shard

OSS = catalog.get_model("gpt-oss-20b")
PLAIN = OSS.model_copy(update={"activation_func_clamp_value": None, "glu_linear_offset": 0.0})
T = 4096
PAIRS = 4 * T  # top-4, load 1, tp 1
F = 2880


def shard(**kw: object) -> Shard:
    return Shard(tokens=T, seq_per_cp_rank=T, moe_load=1.0, **kw)  # type: ignore[arg-type]


def test_the_zoo_entries_carry_the_clamp_and_offset() -> None:
    for name in ("gpt-oss-20b", "gpt-oss-120b"):
        arch = catalog.get_model(name)
        assert arch.activation_func_clamp_value == 7.0 and arch.glu_linear_offset == 1.0
        assert "clamped GLU" not in arch.source


def test_megatron_fused_quick_geglu_keeps_fc1s_output_and_the_clamped_copy() -> None:
    # clamp saves its input (fc1's output, 2F) and the Function the clamped cat (2F): 2F more
    # bf16 per pair than the fused kernel alone: 16,384 x 2 x 2880 x 2 = 188,743,680 bytes
    sh = shard(fused_swiglu=True)
    assert moe_bytes(OSS, sh) - moe_bytes(PLAIN, sh) == 16_384 * 2 * 2880 * 2 == 188_743_680
    # moe_act recompute: CheckpointWithoutOutput runs the activation under no_grad, keeping
    # fc1's output only: nothing more
    act = shard(fused_swiglu=True, recompute="core_attn", modules=frozenset({"moe_act"}))
    assert moe_bytes(OSS, act) == moe_bytes(PLAIN, act)
    # SwiGLU (offset 0): WeightedSwiGLUFunction clamps inside (fused_bias_swiglu.py:275)
    swiglu = OSS.model_copy(update={"glu_linear_offset": 0.0, "activation": "swiglu"})
    assert moe_bytes(swiglu, sh) == moe_bytes(PLAIN, sh)


def test_megatrons_unfused_glu_keeps_the_clamped_gate() -> None:
    # activation_func(x_glu.clamp(...)) saves the clamped gate half: F more bf16 per pair
    sh = shard(fused_swiglu=False)
    assert moe_bytes(OSS, sh) - moe_bytes(PLAIN, sh) == 16_384 * 2880 * 2


def test_torchtitans_eager_experts_keep_seven_widths() -> None:
    # e347b1e5 swiglu: fc1's output 2F (the clamps' input), the clamped gate, sigmoid's output,
    # the gate product, x_linear + 1 (4F), fc2's input F: 7F; planner kept 2F + F + F before,
    # so 3F more: 16,384 x 3 x 2880 x 2 = 283,115,520 bytes
    eager = shard(weighted_experts=False, fused_swiglu=False)
    assert moe_bytes(OSS, eager) - moe_bytes(PLAIN, eager) == 16_384 * 3 * 2880 * 2
    compiled = shard(weighted_experts=False, fused_swiglu=True)
    assert moe_bytes(OSS, compiled) == moe_bytes(PLAIN, compiled)


def test_torchtitans_sinks_keep_a_copy_of_the_attention_output() -> None:
    # eager: wo's contiguous copy 2 x 64 x 64 = 8,192 B per token, sigmoid's fp32 output 4 x 64
    # and its bf16 cast 2 x 64: 8,576 B per token; compiled the scale is rebuilt: 8,192
    vanilla = OSS.model_copy(update={"softmax_type": "vanilla"})
    eager = shard(torchtitan=True, weighted_experts=False, fused_norm=False)
    assert attention_bytes(OSS, eager) - attention_bytes(vanilla, eager) == 8_576 * T
    compiled = shard(torchtitan=True, weighted_experts=False, fused_norm=True)
    assert attention_bytes(OSS, compiled) - attention_bytes(vanilla, compiled) == 8_192 * T
    megatron = shard()  # TE's fused attention takes the sinks as softmax_offset: nothing more
    assert attention_bytes(OSS, megatron) == attention_bytes(vanilla, megatron)


def test_megatron_line_reads_the_clamp_and_offset() -> None:
    line = TINY_LINE + " --quick-geglu --activation-func-clamp-value 7.0 --glu-linear-offset 1.0"
    line += " --no-bias-gelu-fusion"  # TINY_LINE is dense: mlp.py:317-318 fuses no quick_gelu
    r = megatron_args.read(line, "h100-sxm-80gb", 8, "run.sh")
    assert r.doc["model"]["activation_func_clamp_value"] == 7.0
    assert r.doc["model"]["glu_linear_offset"] == 1.0
    assert "--activation-func-clamp-value" not in r.ignored + r.unknown
    with pytest.raises(InputError, match="--activation-func-clamp-value: must be finite"):
        megatron_args.read(TINY_LINE + " --activation-func-clamp-value 0", "h100-sxm-80gb", 8)


def test_hf_config_reads_swiglu_limit() -> None:
    # HF GptOssConfig's swiglu_limit (7.0 in the published config, tests/data/hf); absent: 7.0;
    # the linear half's +1 (HF GptOssExperts) is glu_linear_offset 1.0
    cfg = json.loads((HF / "gpt-oss-120b.json").read_text())
    arch = arch_from_hf({**cfg, "swiglu_limit": 5}, "x.json")
    assert arch.activation_func_clamp_value == 5.0 and arch.glu_linear_offset == 1.0
    del cfg["swiglu_limit"]
    assert arch_from_hf(cfg, "x.json").activation_func_clamp_value == 7.0
    with pytest.raises(InputError, match="swiglu_limit: must be a positive number"):
        arch_from_hf({**cfg, "swiglu_limit": True}, "x.json")


def test_te_op_fuser_clamps_inside_its_op() -> None:
    # --moe-fused-grouped-mlp: ScaledClampedQGeGLU (experts.py:545-562) saves its input and
    # the scales (TE d0067d0d ops/basic/swiglu.py:552-555), as the unclamped fused kernel does
    sh = shard(fused_swiglu=True, te_grouped_mlp=True)
    assert moe_bytes(OSS, sh) == moe_bytes(PLAIN, sh)
    assert moe_bytes(OSS, shard(fused_swiglu=True)) > moe_bytes(PLAIN, shard(fused_swiglu=True))
