"""What torchtitan keeps for the backward where its versions differ, e347b1e5 (the job TOML's) and
b5bcd76c (the Python configurations'): planner counts the larger, a plan not naming its version.

Oracles (pytorch/torchtitan):
- e347b1e5 models/qwen3/infra/parallelize.py:39-54, the per-op save list: no
  `_c10d_functional.all_to_all_single` (deepseek_v3/infra/parallelize.py:41,
  gpt_oss/infra/parallelize.py:50, llama4/infra/parallelize.py:59 have it); b5bcd76c
  distributed/activation_checkpoint.py:61-63, one list for every model, with it.
- b5bcd76c models/common/moe.py:290-292: the router gate under torch.autocast(float32), so the
  matmul saves fp32 copies of its bf16 input (T x h) and weight (E x h); e347b1e5
  models/moe/moe.py:312-318 runs the gate in bf16 and casts only the logits.
Hand arithmetic in each test."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.inputs import catalog
from planner.inputs.hybrid import layer_kind
from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.model.moe_activations import moe_bytes, router_copy_bytes
from planner.model.per_op_saved import all_to_all_bytes
from planner.model.shard import Shard
from planner.model.stage_activations import shard

QWEN3 = catalog.get_model("qwen3-30b-a3b")  # h 2048, top-8 of 128 experts
V3 = catalog.get_model("deepseek-v3")  # h 7168, top-8 of 256 experts
T = 4096


def titan(**kw: object) -> Shard:
    return Shard(tokens=T, seq_per_cp_rank=T, weighted_experts=False, moe_load=1.0, **kw)  # type: ignore[arg-type]


def test_all_to_all_bytes_keep_the_larger_figure() -> None:
    # received (8 x 4096 x load 1) and returned (8 x 4096) rows, 2048 wide, bf16, b5bcd76c's one
    # list (a plan does not name its version): 2 x 2 x 8 x 4096 x 2048 = 268,435,456 bytes a
    # layer at ep 8; DeepSeek-V3: 2 x 2 x 8 x 4096 x 7168
    moe, sh = layer_kind(True), titan()
    assert all_to_all_bytes(QWEN3, moe, sh, 8) == pytest.approx(268_435_456)
    assert all_to_all_bytes(V3, moe, sh, 8) == pytest.approx(939_524_096)


def test_router_gate_fp32_copies_at_b5bcd76c() -> None:
    # Qwen3-30B-A3B, 4096 local tokens, bf16: the fp32 input copy 4 x 4096 x 2048 = 33,554,432
    # and the fp32 weight copy 4 x 128 x 2048 = 1,048,576: 34,603,008 bytes a MoE layer
    sh = titan(torchtitan=True, fused_swiglu=True)
    assert router_copy_bytes(QWEN3, sh) == pytest.approx(34_603_008)
    diff = moe_bytes(QWEN3, sh) - moe_bytes(QWEN3, titan(fused_swiglu=True))
    assert diff == pytest.approx(34_603_008)  # the version unknown: counted, the larger


def test_router_gate_copy_under_tp_and_fp32() -> None:
    # DeepSeek-V3 at tp 4: 1024 local tokens: 4 x 7168 x (1024 + 256) = 36,700,160 bytes; fp32
    # training casts nothing (the input already fp32): none
    sh = titan(torchtitan=True, tp=4, sequence_parallel=True)
    assert router_copy_bytes(V3, sh) == pytest.approx(36_700_160)
    assert router_copy_bytes(V3, titan(torchtitan=True, value_bytes=4.0)) == 0.0
    assert router_copy_bytes(V3, titan(tp=4, sequence_parallel=True)) == 0.0  # not torchtitan


def test_router_reads_every_token_with_ep_off_under_tp() -> None:
    # torchtitan b5bcd76c common moe_sharding.py:91-92, :113-123: EP off, the gate's input
    # is replicated over TP (tp=spmd.R), so the gate scores all 4096 tokens, not 1024: the fp32
    # copy 4 x 7168 x (4096 + 256) = 124,780,544 bytes, and the router's fp32 scores and
    # probabilities 2 x 4 x 4096 x 256 against 2 x 4 x 1024 x 256 (3 x 2,097,152 more)
    whole = titan(torchtitan=True, tp=4, sequence_parallel=True, router_tokens_whole=True)
    share = titan(torchtitan=True, tp=4, sequence_parallel=True)
    assert router_copy_bytes(V3, whole) == pytest.approx(124_780_544)
    copies = 124_780_544 - 36_700_160
    assert moe_bytes(V3, whole) - moe_bytes(V3, share) == pytest.approx(copies + 3 * 2_097_152)


def test_the_layout_says_when_the_router_reads_every_token() -> None:
    # a torchtitan layout with ep 1 under tp 4 replicates the gate's input; with ep 4 (tokens
    # dispatched from each rank's share) or outside torchtitan it does not
    job = parse_plan({"model": {"name": "qwen3-30b-a3b"}, "cluster": {"gpu": "h100-sxm-80gb",
        "num_gpus": 8}, "training": {"seq_length": 4096, "global_batch_size": 8,
        "framework": "torchtitan"}}).job  # fmt: skip
    assert shard(job, Layout(tp=4, dp=2)).router_tokens_whole
    assert not shard(job, Layout(tp=4, dp=2, ep=2)).router_tokens_whole
    assert not shard(replace(job, framework="megatron"), Layout(tp=4, dp=2)).router_tokens_whole
