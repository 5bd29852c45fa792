"""Megatron's --ddp-bucket-size and --ddp-num-buckets: read from a command line, written back to a
plan, emitted by launch, and what the last bucket costs (planner.model.dp_sync).

Oracles: Megatron-LM's DDP (distributed_data_parallel.py at d98e8a64: bucket_size defaults to
max(40M, 1M x dp); each bucket is one collective; training.py resolve_ddp_bucket_size: with
num_buckets, the chunk's parameters // num_buckets; DistributedDataParallelConfig rejects both)
and hand arithmetic on the bucketed reduce-scatter with planner.model.comms' collectives (tested
against nccl-tests' bus-bandwidth factors in tests/model/test_comms.py).
"""

from __future__ import annotations

import math

import pytest
import yaml
from jobs import h100_cluster

from planner.emit import megatron
from planner.emit.launch import render
from planner.inputs import megatron_args, plan_writer
from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.model import comms, cost, dp_buckets, dp_sync, nccl_shares
from planner.search.rules import check_plan

LINE = (
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm "
    "--untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256 "
    "--seq-length 8192 --position-embedding-type rope --micro-batch-size 1 "
    "--global-batch-size 128 --bf16 --use-distributed-optimizer --overlap-grad-reduce "
    "--overlap-param-gather --ddp-bucket-size 768000000"
)


def test_the_flag_is_read_written_back_and_emitted() -> None:
    plan = parse_plan(megatron_args.to_plan(LINE, "h100-sxm-80gb", 16))
    lay = plan.require_layout()
    assert lay.ddp_bucket_size == 768_000_000
    text = plan_writer.render(plan.job, lay, {"name": "llama3.1-8b"}, ["t"])
    assert "ddp_bucket_size = 768000000" in text
    args = [a for group in megatron.arguments(plan).parallel for a in group]
    assert args[args.index("--ddp-bucket-size") + 1] == "768000000"
    # Megatron-Bridge's DistributedDataParallelConfig.bucket_size (Optional[int], the schema
    # in tests/data/megatron_bridge_config_schema.json)
    bridge = yaml.safe_load(render(plan, "megatron-bridge")[1])
    assert bridge["ddp"]["bucket_size"] == 768_000_000
    # without the flag: Megatron's default, and launch says nothing
    bare = parse_plan(
        megatron_args.to_plan(LINE.replace(" --ddp-bucket-size 768000000", ""), "h100-sxm-80gb", 16)
    )
    assert bare.require_layout().ddp_bucket_size is None
    assert "--ddp-bucket-size" not in [a for g in megatron.arguments(bare).parallel for a in g]


def test_the_last_bucket_shows_whatever_the_window() -> None:
    """1e9 dense parameters over 64 H100 (dp 64, 8 nodes), fp32 gradients, windows far longer
    than the traffic: only the last bucket of each collective shows. Megatron's default bucket,
    max(40M, 64M) parameters, makes 16 buckets; --ddp-bucket-size 500M makes 2, each a
    collective of 8 times the bytes: 8 times the bandwidth seconds, the same steps' latency and
    NCCL call."""
    cluster = h100_cluster(64)
    groups = dp_sync.data_parallel_groups(cluster, Layout(tp=1, pp=1, dp=64))
    grp = groups[0]
    n = 1e9

    def shown(bucket: int | None) -> float:
        lay = Layout(tp=1, pp=1, dp=64, ddp_bucket_size=bucket)
        return dp_sync.data_parallel(groups, lay, n, 0.0, 4.0, 100.0, 100.0, 1)[0]

    for bucket, count in ((None, 16), (500_000_000, 2)):
        per_bucket = dp_buckets.bucket_params(Layout(ddp_bucket_size=bucket), 64, n)
        assert math.ceil(n / per_bucket) == count
        # the last bucket of the reduce-scatter (4 B a gradient) and of the all-gather (2 B)
        last = comms.reduce_scatter(4 * n / count, grp) + comms.all_gather(2 * n / count, grp)
        assert shown(bucket) == pytest.approx(last)
    fixed = 2 * (comms.ring_latency(grp) + grp.call(nccl_shares.RING))
    assert shown(500_000_000) - fixed == pytest.approx(8 * (shown(None) - fixed))


def test_num_buckets_is_read_emitted_and_splits_the_chunk() -> None:
    line = LINE.replace("--ddp-bucket-size 768000000", "--ddp-num-buckets 4")
    plan = parse_plan(megatron_args.to_plan(line, "h100-sxm-80gb", 16))
    lay = plan.require_layout()
    assert (lay.ddp_num_buckets, lay.ddp_bucket_size) == (4, None)
    args = [a for group in megatron.arguments(plan).parallel for a in group]
    assert args[args.index("--ddp-num-buckets") + 1] == "4"
    # Megatron-Bridge's comm-overlap setup gives DDP 128 MB buckets with the distributed
    # optimizer and dp > 1 (comm_overlap.py, 067f987d), which Megatron-Core refuses beside a
    # bucket count: that target refuses the plan, naming the field
    with pytest.raises(InputError, match=r"parallel\.ddp_num_buckets: Megatron-Bridge"):
        render(plan, "megatron-bridge")
    # 1e9 parameters, one chunk, 4 buckets of 250M: the last one's reduce-scatter and gather show
    cluster = h100_cluster(64)
    groups = dp_sync.data_parallel_groups(cluster, Layout(tp=1, pp=1, dp=64))
    four = Layout(tp=1, pp=1, dp=64, ddp_num_buckets=4)
    assert dp_buckets.bucket_params(four, 64, 1e9) == 250e6
    shown = dp_sync.data_parallel(groups, four, 1e9, 0.0, 4.0, 100.0, 100.0, 1)[0]
    grp = groups[0]
    assert shown == pytest.approx(
        comms.reduce_scatter(4 * 1e9 / 4, grp) + comms.all_gather(2 * 1e9 / 4, grp)
    )
    # with vpp 2 a stage holds two chunks: buckets of 1e9 / 2 // 4 = 125M
    assert dp_buckets.bucket_params(Layout(pp=2, vpp=2, ddp_num_buckets=4), 64, 1e9) == 125e6


def test_both_bucket_flags_are_refused() -> None:
    line = LINE + " --ddp-num-buckets 4"
    plan = parse_plan(megatron_args.to_plan(line, "h100-sxm-80gb", 16))
    with pytest.raises(InputError, match=r"parallel\.ddp_num_buckets"):
        check_plan(plan)


def test_a_bucket_smaller_than_a_tensor_is_one_tensor() -> None:
    """Megatron closes a bucket once it holds bucket_size parameters, whole tensors each: NeMo 2's
    MLPerf 405B default of 200 parameters makes one bucket per tensor. By hand: 1e9 parameters
    in 4 layers of 6 tensors, the embedding and the output layer are 26 tensors, so buckets of
    1e9 / 26 parameters, not 5 million buckets of 200."""
    tiny = Layout(tp=1, pp=1, dp=64, ddp_bucket_size=200)
    assert dp_buckets.bucket_params(tiny, 64, 1e9, layers=4) == pytest.approx(1e9 / 26)
    # the Llama 3 8B line (32 layers on 16 H100) with it: the step stays what per-tensor buckets
    # cost, within a percent of Megatron's default buckets (5 million buckets' latencies of
    # ~0.1 ms each would add minutes)
    plans = [
        parse_plan(megatron_args.to_plan(LINE.replace("768000000", size), "h100-sxm-80gb", 16))
        for size in ("200", "40000000")
    ]
    steps = [cost.estimate(p.job, p.require_layout()).step_time_s for p in plans]
    assert steps[0] == pytest.approx(steps[1], rel=0.01)


def test_without_the_grad_reduce_overlap_each_chunk_is_one_bucket() -> None:
    # Megatron-LM d98e8a64 sets bucket_size None ("infinity") when overlap_grad_reduce is off,
    # whatever the line asked (training.py:2192-2193, distributed_data_parallel.py:135-137): a
    # chunk's buffer is one bucket. A stage of 1.2e9 parameters in 3 chunks: 4e8 each.
    lay = Layout(tp=1, pp=2, dp=8, vpp=3, overlap_grad_reduce=False, ddp_bucket_size=1_000_000)
    assert dp_buckets.bucket_params(lay, 8, 1.2e9, 12) == pytest.approx(4e8)
    assert dp_buckets.bucket_params(lay.with_(ddp_bucket_size=None), 8, 1.2e9, 12) == pytest.approx(
        4e8
    )
    # so a line's --ddp-bucket-size changes nothing without the overlap
    off = LINE.replace(" --overlap-grad-reduce --overlap-param-gather", "")
    small = parse_plan(
        megatron_args.to_plan(off.replace("768000000", "1000000"), "h100-sxm-80gb", 16)
    )
    big = parse_plan(megatron_args.to_plan(off, "h100-sxm-80gb", 16))
    step = [cost.estimate(p.job, p.require_layout()).step_time_s for p in (small, big)]
    assert step[0] == pytest.approx(step[1], rel=1e-12)
