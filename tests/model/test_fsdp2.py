"""FSDP2 model states under torchtitan (planner.model.fsdp2). Oracle: hand arithmetic on the
mechanisms its docstring cites (torchtitan apply_fsdp's reshard policy, torch pipelining's
no-sync backwards, FSDPParam's fp32 unsharded gradient accumulation)."""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_text import plan_text, write

from planner.inputs.plan import load_plan
from planner.model import cost, fsdp2, memory
from planner.model.stage_params import stage_params
from planner.search.rules import check_plan

TITAN = "[training]\nframework = 'torchtitan'\nseq_length = 8192\nglobal_batch_size = 128\n"


def _plan(tmp_path: Path, parallel: str, extra: str = "") -> tuple[object, object]:
    plan = check_plan(
        load_plan(write(tmp_path, plan_text(training=TITAN, parallel=parallel) + extra))
    )
    return plan.job, plan.require_layout()


def test_pipelined_stage_keeps_parameters_and_fp32_gradients(tmp_path: Path) -> None:
    # 8 GPUs, pp 2 -> dp_shard 4; rank 1 holds P parameters:
    # weights 4P/4 (fp32 shard) + 2P (bf16 kept gathered); grads 4P/4 + 4P (fp32 accumulated);
    # optimizer 8P/4 (AdamW moments)
    job, lay = _plan(tmp_path, "[parallel]\npp = 2\nzero_stage = 3\n")
    chunks = lay.chunk_layers(job.arch.num_layers)[1]
    dense, expert = stage_params(job, lay, 1, chunks)
    p = dense + expert
    st = memory.stage_memory(job, lay, 1, chunks)
    assert st.weights == pytest.approx(p + 2 * p)
    assert st.grads == pytest.approx(p + 4 * p)
    assert st.optimizer == pytest.approx(2 * p)


def test_without_pipeline_only_shards_stay(tmp_path: Path) -> None:
    # pp 1, dp_shard 8, "default" reshards after forward: 4P/8 + the output layer kept from
    # forward to backward (2 bytes each); grads 4P/8; optimizer 8P/8
    job, lay = _plan(tmp_path, "[parallel]\nzero_stage = 3\n")
    chunks = lay.chunk_layers(job.arch.num_layers)[0]
    dense, _ = stage_params(job, lay, 0, chunks)
    out = job.arch.padded_vocab(1) * job.arch.hidden_size
    st = memory.stage_memory(job, lay, 0, chunks)
    assert st.weights == pytest.approx(dense / 2 + 2 * out)
    assert st.grads == pytest.approx(dense / 2)
    assert st.optimizer == pytest.approx(dense)


def test_never_keeps_parameters_gathered_even_without_pipeline(tmp_path: Path) -> None:
    never = "\n[torchtitan]\nreshard_after_forward = 'never'\n"
    job, lay = _plan(tmp_path, "[parallel]\nzero_stage = 3\n", never)
    chunks = lay.chunk_layers(job.arch.num_layers)[0]
    dense, _ = stage_params(job, lay, 0, chunks)
    assert memory.stage_memory(job, lay, 0, chunks).weights == pytest.approx(dense / 2 + 2 * dense)


def test_pipelining_costs_more_than_megatron_zero3_said(tmp_path: Path) -> None:
    # the same layout as Megatron-FSDP (per-micro-batch re-gathering) keeps far smaller model
    # states: the difference is the gathered bf16 parameters and fp32 gradients (6 bytes a
    # parameter; Megatron-FSDP's own unsharded buffers are transient,
    # `megatron_fsdp.transient_and_resident`)
    job, lay = _plan(tmp_path, "[parallel]\npp = 2\nzero_stage = 3\n")
    from dataclasses import replace

    mega = replace(job, framework="megatron", torchtitan=None)
    chunks = lay.chunk_layers(job.arch.num_layers)[1]
    titan = memory.stage_memory(job, lay, 1, chunks)
    megatron = memory.stage_memory(mega, lay, 1, chunks)
    p = sum(stage_params(job, lay, 1, chunks))
    assert (titan.weights + titan.grads) - (megatron.weights + megatron.grads) > 5 * p


def test_fsdp2_traffic_once_per_step_under_pipelining(tmp_path: Path) -> None:
    # kept gathered under PP: one all-gather and one reduce-scatter per step, whatever m;
    # resharding ("always") gathers twice per micro-batch
    job, lay = _plan(tmp_path, "[parallel]\npp = 2\nzero_stage = 3\n")
    few = fsdp2.data_parallel_time(job, lay, 1e9, 0.0, 0.0, 0.0, 4)
    many = fsdp2.data_parallel_time(job, lay, 1e9, 0.0, 0.0, 0.0, 32)
    assert sum(few) == pytest.approx(sum(many))
    always = "\n[torchtitan]\nreshard_after_forward = 'always'\n"
    job2, lay2 = _plan(tmp_path, "[parallel]\npp = 2\nzero_stage = 3\n", always)
    assert fsdp2.keeps_unsharded(job2, lay2)  # pipelining keeps them after the first backward
    resharding = fsdp2.data_parallel_time(job2, lay2, 1e9, 0.0, 0.0, 0.0, 4)
    assert sum(resharding) > sum(few)


def test_pipelining_receive_buffers_by_hand(tmp_path: Path) -> None:
    # torch pipelining allocates one activation and one gradient receive buffer per micro-batch
    # (first stage: no activation buffer; last: no gradient buffer). 8 GPUs, pp 2, dp 4, batch
    # 128 -> 32 micro-batches of [1, 8192, 4096] bf16 = 64 MiB each; each rank holds one kind
    job, lay = _plan(tmp_path, "[parallel]\npp = 2\nzero_stage = 3\n")
    one = 8192 * 4096 * 2
    assert fsdp2.pipeline_buffers(job, lay, 0) == 32 * one
    assert fsdp2.pipeline_buffers(job, lay, 1) == 32 * one
    # interleaved (vpp 2): rank 0 holds stages 0 and 2 -> 1 + 2 buffers a micro-batch
    job2, lay2 = _plan(tmp_path, "[parallel]\npp = 2\nvpp = 2\nzero_stage = 3\n")
    assert fsdp2.pipeline_buffers(job2, lay2, 0) == 3 * 32 * one
    from dataclasses import replace

    assert fsdp2.pipeline_buffers(replace(job, framework="megatron"), lay, 0) == 0.0


def test_step_time_charges_fsdp2_traffic_not_megatron_zero3(tmp_path: Path) -> None:
    """cost.estimate takes a torchtitan plan's data-parallel time from fsdp2 (kept gathered
    under PP: the same whatever the micro-batch count), not from Megatron's ZeRO-3 (a gather
    per layer per micro-batch, which grows with it). Oracle: fsdp2.data_parallel_time's own
    m-independence, seen through the whole step's breakdown."""
    exposed = []
    for gbs in (8, 64):
        training = TITAN.replace("global_batch_size = 128", f"global_batch_size = {gbs}")
        path = write(
            tmp_path,
            plan_text(training=training, parallel="[parallel]\npp = 2\nzero_stage = 3\n"),
            f"p{gbs}.toml",
        )
        plan = check_plan(load_plan(path))
        b = cost.estimate(plan.job, plan.require_layout()).breakdown
        exposed.append(b.dp_comm_exposed + b.dp_comm_hidden)
    # the same layout, 4 and 32 micro-batches per step
    # the hidden part is charged its SM share on top: equal totals up to that charge
    assert exposed[1] == pytest.approx(exposed[0], rel=0.05)


def test_dense_and_expert_shards_share_fsdp2_windows(tmp_path: Path) -> None:
    """torchtitan's FSDP2 on an MoE model (Qwen3 30B-A3B, 16 H100, ep 8, no pipeline): each of
    the u blocks is an FSDP unit whose dense and expert collectives share FSDP2's all-gather and
    reduce-scatter streams, prefetched one block ahead, so per micro-batch the forward shows
    a + (u - 1) max(a - F / u, 0) and the backward c + (u - 1) max(c - B / u, 0), a = a_d + a_e
    the block's two all-gathers, c = a + r_d + r_e with its reduce-scatters (hand arithmetic on
    `fsdp2._collectives` of one block of each kind), not each kind's own excess: windows of 3/4
    of the sums hide either kind alone."""
    model = '[model]\nname = "qwen3-30b-a3b"\n'
    cluster = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n'
    plan = check_plan(
        load_plan(
            write(
                tmp_path,
                plan_text(model, cluster, TITAN, "[parallel]\nep = 8\nzero_stage = 3\n"),
            )
        )
    )
    job, lay = plan.job, plan.require_layout()
    m, u, dense, expert = 4, 48, 3e9, 1e9
    n_d, n_e = fsdp2.shard_groups(job, lay)
    a_d, r_d = fsdp2._collectives(job, dense / u, lay.tp, n_d, 1)
    a_e, r_e = fsdp2._collectives(job, expert / u, lay.expert_tp * lay.ep, n_e, 1)
    a, c = a_d + a_e, a_d + a_e + r_d + r_e
    f, b = 0.75 * a * u, 0.75 * c * u  # one micro-batch's forward and backward
    assert max(a_d, a_e) < f / u and max(c - r_e - a_e, c - r_d - a_d) < b / u  # each alone hides
    exposed, hidden = fsdp2.data_parallel_time(job, lay, dense, expert, f, b, m, u)
    hand = m * (a + (u - 1) * (a - f / u)) + m * (c + (u - 1) * (c - b / u))
    assert exposed == pytest.approx(hand)
    assert exposed + hidden == pytest.approx(m * u * (a + c))
