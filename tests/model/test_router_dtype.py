"""Megatron --moe-router-dtype fp32 / fp64 (`Job.moe_router_dtype`, planner.model.router_dtype).

Oracle: NVIDIA/Megatron-LM d98e8a64 source lines, with hand arithmetic below:
- the router's logits take the flag's dtype (router.py:106-111) and the probabilities the
  logits' (moe_utils.py:936 `probs = probs.type_as(logits)`);
- MoEAllGatherTokenDispatcher.token_combine reduce-scatters `hidden_states.to(local_probs.dtype)`
  over the expert-TP x EP group (token_dispatcher.py:365-367); MoEAlltoAllTokenDispatcher's
  combine_preprocess does so over the expert-TP group (:829-833); autograd's gradient of the
  reduce-scatter is an all-gather of the gradient in that dtype; the EP all-to-all stays bf16;
- the flex dispatcher casts no tokens (DeepEP / HybridEP take fp32 probabilities anyway,
  :1136-1141, :1313-1319).
The QA line (Mixtral 8x7B on 16 H100, tp 2 sp, etp 2, ep 8, allgather) was read with and without
the flag; before the fix both gave 17.345 s and 75.6 GiB.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs import megatron_args
from planner.inputs.layout import Layout
from planner.inputs.plan import Plan, parse_plan
from planner.inputs.plan_writer import render
from planner.model import comms, cost, dispatch, memory, router_dtype
from planner.model import moe_activations as ma
from planner.model.shard import Shard

MIXTRAL_AG = (
    "torchrun --nproc-per-node 8 --nnodes 2 pretrain_gpt.py "
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --seq-length 4096 "
    "--max-position-embeddings 32768 --micro-batch-size 1 --global-batch-size 256 --bf16 "
    "--vocab-size 32000 --tokenizer-type NullTokenizer --swiglu --normalization RMSNorm "
    "--disable-bias-linear --position-embedding-type rope --untie-embeddings-and-output-weights "
    "--transformer-impl transformer_engine --num-experts 8 --moe-router-topk 2 "
    "--moe-grouped-gemm --moe-token-dispatcher-type allgather "
    "--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 8 "
    "--expert-tensor-parallel-size 2 --pipeline-model-parallel-size 1 "
    "--use-distributed-optimizer --hidden-dropout 0 --attention-dropout 0 "
)
"""The QA's Mixtral line (/tmp/qa3s34/mixtral_ag.sh), with the tokenizer named."""


def _plan(extra: str = "") -> Plan:
    doc = megatron_args.read(MIXTRAL_AG + extra, "h100-sxm-80gb", None, where="t.sh").doc
    return parse_plan(doc)


def test_the_flag_is_read() -> None:
    assert _plan().job.moe_router_dtype is None
    assert _plan("--moe-router-dtype fp32").job.moe_router_dtype == "fp32"
    assert _plan("--moe-router-dtype fp64").job.moe_router_dtype == "fp64"


def test_combine_and_cast_bytes() -> None:
    j = job("mixtral-8x7b", "h100-sxm-80gb", 16, 4096, 256)
    assert router_dtype.combine_bytes(j) == 2 and router_dtype.cast_bytes(j) == 0
    fp32 = replace(j, moe_router_dtype="fp32")
    assert router_dtype.combine_bytes(fp32) == 4 and router_dtype.cast_bytes(fp32) == 4
    assert router_dtype.cast_bytes(replace(j, moe_router_dtype="fp64")) == 8
    # fp32 training: the cast to fp32 returns its input (no copy), fp64 copies
    wide = replace(j, precision="fp32", moe_router_dtype="fp32")
    assert router_dtype.combine_bytes(wide) == 4 and router_dtype.cast_bytes(wide) == 0
    assert router_dtype.cast_bytes(replace(wide, moe_router_dtype="fp64")) == 8
    # torchtitan's MoE has no such cast
    assert router_dtype.cast_bytes(replace(fp32, framework="torchtitan")) == 0


def test_allgather_combine_by_hand() -> None:
    # the QA's numbers: each rank routes its SP shard, 4096 / 2 tokens; the etp x ep = 16 ranks'
    # tokens are gathered, G = 2048 x 16 x 4096 elements. Forward: all-gather G bf16, the
    # reduce-scatter G fp32; backward: reduce-scatter G bf16 (the gather's gradient), all-gather
    # G fp32 (the reduce-scatter's)
    j = job("mixtral-8x7b", "h100-sxm-80gb", 16, 4096, 256)
    grp = comms.place(j.cluster, 1, 16)
    g = 2048 * 16 * 4096
    r = dispatch.Routing(tokens=2048, hidden=4096, topk=2, experts=8)
    bf16 = dispatch.moe_dispatch(j.cluster, 2, 8, r, "allgather")
    fp32 = dispatch.moe_dispatch(j.cluster, 2, 8, r, "allgather", combine_bytes=4)
    by_hand = (
        comms.all_gather(2 * g, grp)
        + comms.reduce_scatter(4 * g, grp)
        + comms.reduce_scatter(2 * g, grp)
        + comms.all_gather(4 * g, grp)
    )
    assert fp32 == pytest.approx(by_hand)
    assert bf16 == pytest.approx(
        2 * (comms.all_gather(2 * g, grp) + comms.reduce_scatter(2 * g, grp))
    )
    assert bf16 * 1e3 == pytest.approx(4.51, abs=0.01)  # the QA's figures
    assert fp32 * 1e3 == pytest.approx(6.67, abs=0.01)
    # a recomputed forward repeats the forward's pair
    twice = dispatch.moe_dispatch(j.cluster, 2, 8, r, "allgather", n_fwd=2, combine_bytes=4)
    assert twice - fp32 == pytest.approx(
        comms.all_gather(2 * g, grp) + comms.reduce_scatter(4 * g, grp)
    )


def test_alltoall_expert_tp_reduce_scatter_by_hand() -> None:
    # etp 2: the copies all-gathered over the expert-TP pair and reduce-scattered back
    # (c = tokens x topk x h x etp elements); only that reduce-scatter and its gradient's
    # all-gather widen, the EP all-to-alls stay bf16
    j = job("mixtral-8x7b", "h100-sxm-80gb", 16, 4096, 256)
    r = dispatch.Routing(tokens=2048, hidden=4096, topk=2, experts=8)
    tp_grp = comms.place(j.cluster, 1, 2)
    c = 2048 * 2 * 4096 * 2
    bf16 = dispatch.moe_dispatch(j.cluster, 2, 4, r, "alltoall")
    fp32 = dispatch.moe_dispatch(j.cluster, 2, 4, r, "alltoall", combine_bytes=4)
    widened = (comms.reduce_scatter(4 * c, tp_grp) - comms.reduce_scatter(2 * c, tp_grp)) + (
        comms.all_gather(4 * c, tp_grp) - comms.all_gather(2 * c, tp_grp)
    )
    assert fp32 - bf16 == pytest.approx(widened)
    # without expert TP, and under flex, nothing is cast
    for etp, kind in ((1, "alltoall"), (2, "flex"), (1, "flex")):
        plain = dispatch.moe_dispatch(j.cluster, etp, 4, r, kind)
        assert dispatch.moe_dispatch(j.cluster, etp, 4, r, kind, combine_bytes=4) == plain


def _shard(cast: float, etp: int = 2) -> Shard:
    return Shard(tokens=4096, tp=2, sequence_parallel=True, etp=etp, combine_cast_bytes=cast)


def test_forward_copy_by_hand() -> None:
    j = job("mixtral-8x7b", "h100-sxm-80gb", 16, 4096, 256)
    arch = j.arch
    # allgather: the fp32 copy of the gathered tokens, 2048 x 2 x 8 x 4096 x 4 B = 0.5 GiB
    more = ma.forward_bytes(arch, _shard(4), "allgather", 8) - ma.forward_bytes(
        arch, _shard(0), "allgather", 8
    )
    assert more == 2048 * 2 * 8 * 4096 * 4 == 2**29
    # alltoall with etp 2: the copy of the n gathered pairs, n = k x T/tp x load x etp
    n = 2 * 2048 * 1.2 * 2
    more = ma.forward_bytes(arch, _shard(4), "alltoall", 4) - ma.forward_bytes(
        arch, _shard(0), "alltoall", 4
    )
    assert more == pytest.approx(4 * 4096 * n)
    for etp, kind in ((1, "alltoall"), (2, "flex")):
        assert ma.forward_bytes(arch, _shard(4, etp), kind, 4) == ma.forward_bytes(
            arch, _shard(0, etp), kind, 4
        )


def test_backward_gradient_copy() -> None:
    # the output gradient all-gathered in fp32 (4 h per pair) beside its bf16 cast (2 h): 6 h
    # against the two bf16 gradients' 4 h, where that term is the largest (a narrow expert FFN)
    j = job("mixtral-8x7b", "h100-sxm-80gb", 16, 4096, 256)
    arch = j.arch.model_copy(update={"moe_ffn_hidden_size": 512})
    n = 2 * 2048 * 1.2 * 2
    wide = ma.backward_bytes(arch, _shard(4), "alltoall")
    assert wide == pytest.approx(6 * 4096 * n)
    assert ma.backward_bytes(arch, _shard(0), "alltoall") == pytest.approx(4 * 4096 * n)
    assert ma.backward_bytes(arch, _shard(4), "flex") == pytest.approx(4 * 4096 * n)


def test_qa_line_step_and_peak() -> None:
    base, fp32 = _plan(), _plan("--moe-router-dtype fp32")
    lay = base.require_layout()
    peak = memory.estimate(fp32.job, lay).peak - memory.estimate(base.job, lay).peak
    assert peak == pytest.approx(2**29 * memory.fragmentation(base.job))  # 0.5 GiB, x 1.1
    step = cost.estimate(fp32.job, lay).step_time_s - cost.estimate(base.job, lay).step_time_s
    # 32 MoE layers x 32 micro-batches (256 / dp 8), each 6.67 - 4.51 ms longer, exposed
    assert step == pytest.approx(32 * 32 * (6.67 - 4.51) * 1e-3, rel=0.01)


def test_layer_dispatch_reads_the_job() -> None:
    j = job("mixtral-8x7b", "h100-sxm-80gb", 16, 4096, 256)
    lay = Layout(tp=2, pp=1, dp=8, ep=8, etp=2, sequence_parallel=True)
    lay = replace(lay, moe_token_dispatcher_type="allgather")
    bf16, _ = dispatch.layer_dispatch(j, lay, 4096.0, 1.0, 1, (), 2)
    fp32, _ = dispatch.layer_dispatch(
        replace(j, moe_router_dtype="fp32"), lay, 4096.0, 1.0, 1, (), 2
    )
    assert fp32 / bf16 == pytest.approx(6.67 / 4.51, rel=0.01)


def test_the_plan_file_keeps_it() -> None:
    p = _plan("--moe-router-dtype fp32")
    doc = megatron_args.read(
        MIXTRAL_AG + "--moe-router-dtype fp32", "h100-sxm-80gb", None, where="t.sh"
    ).doc
    text = render(p.job, p.require_layout(), doc["model"], [])
    assert 'moe_router_dtype = "fp32"' in text
