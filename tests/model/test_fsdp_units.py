"""torchtitan's FSDP2: its states without data parallelism and its per-block collectives,
which it shares with Megatron's ZeRO 3 (`dp_sync._fsdp`).

Oracles, hand arithmetic on the cited lines:
- torchtitan b5bcd76c models/llama3/parallelize.py:57-77: fully_shard whatever the degrees.
- torchtitan's trainer keeps gradient sync on across accumulation and FSDP2 reshards after
  each backward: without PP, per micro-batch each block all-gathers for the forward, again for
  the backward unless "never", and reduce-scatters once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_text import plan_text, write

from planner.inputs.plan import load_plan
from planner.model import comms, dp_sync, fsdp2
from planner.model.rank_states import rank_state
from planner.model.stage_params import stage_params
from planner.search.rules import check_plan

TITAN = "[training]\nframework = 'torchtitan'\nseq_length = 8192\nglobal_batch_size = 32\n"


def _titan(tmp_path: Path, gpus: int, parallel: str, titan: str = "", gbs: int = 32) -> tuple:
    cluster = f'[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = {gpus}\n'
    training = TITAN.replace("global_batch_size = 32", f"global_batch_size = {gbs}")
    text = plan_text(cluster=cluster, training=training, parallel=parallel)
    plan = check_plan(load_plan(write(tmp_path, text + titan, f"p{gpus}.toml")))
    return plan.job, plan.require_layout()


def test_torchtitan_without_data_parallelism_still_runs_fsdp2(tmp_path: Path) -> None:
    # pp 8 on 8 GPUs (dp_shard 1): rank 1 holds P parameters: fp32 weights 4P + the bf16 copy
    # kept gathered under PP 2P; fp32 gradient shard 4P + the fp32 accumulated unsharded
    # gradient 4P; AdamW 8P: 22 bytes a parameter, as with dp_replicate 2 (was 16)
    parallel = "[parallel]\npp = 8\nzero_stage = 0\nrecompute = 'full'\n"
    for gpus, rep in ((8, 1), (16, 2)):
        job, lay = _titan(tmp_path, gpus, parallel, f"[torchtitan]\ndp_replicate = {rep}\n")
        chunks = lay.chunk_layers(32)[1]
        p = sum(stage_params(job, lay, 1, chunks))
        w, g, o, _, _ = rank_state(job, lay, 1, chunks)
        assert (w, g, o) == pytest.approx((6 * p, 8 * p, 8 * p))


def _one_block(job: object, lay: object, p: float, u: int) -> tuple[float, float]:
    n_d, _ = fsdp2.shard_groups(job, lay)
    return fsdp2._collectives(job, p / u, lay.tp, n_d, 1)


@pytest.mark.parametrize("policy", ["default", "never"])
def test_fsdp2_collectives_per_block_and_micro_batch_without_pp(
    tmp_path: Path, policy: str
) -> None:
    # 64 GPUs (dp_shard 64), batch 512: m = 8 micro-batches of 1. No window: all traffic
    # shows. Per micro-batch and block: a gather
    # for the forward, one for the backward unless "never", a reduce-scatter: u m (2a + r) or
    # u m (a + r), each block's collective its own (its ring latency paid u times)
    titan = f"[torchtitan]\nreshard_after_forward = '{policy}'\n"
    job, lay = _titan(tmp_path, 64, "[parallel]\nzero_stage = 3\n", titan, gbs=512)
    m, u = lay.num_microbatches(job.global_batch_size), 32
    assert m == 8
    p = sum(stage_params(job, lay, 0, lay.chunk_layers(32)[0]))
    a, r = _one_block(job, lay, p, u)
    exposed, hidden = fsdp2.data_parallel_time(job, lay, p, 0.0, 0.0, 0.0, m, u)
    gathers = 2 if policy == "default" else 1
    assert exposed + hidden == pytest.approx(u * m * (gathers * a + r))
    # one step-wide collective of the stage would have paid one ring latency for u blocks
    whole_a, whole_r = _one_block(job, lay, p, 1)
    latency = comms.ring_latency(comms.place(job.cluster, lay.tp, lay.dense_dp))
    assert u * a - whole_a >= (u - 1) * latency
    assert u * r - whole_r >= (u - 1) * latency


def test_fsdp2_and_megatron_zero3_share_the_per_unit_physics(tmp_path: Path) -> None:
    # the same bytes over the same group, no window: torchtitan's FSDP2 without PP ("default")
    # and Megatron's ZeRO 3 (dp_sync._fsdp, fp32 gradients, bf16 parameters) charge alike
    job, lay = _titan(tmp_path, 64, "[parallel]\nzero_stage = 3\n", gbs=512)
    p = sum(stage_params(job, lay, 0, lay.chunk_layers(32)[0]))
    m = lay.num_microbatches(job.global_batch_size)
    titan = fsdp2.data_parallel_time(job, lay, p, 0.0, 0.0, 0.0, m, 32)
    grp = comms.place(job.cluster, lay.tp, lay.dense_dp)
    mega = dp_sync.data_parallel((grp, grp), lay, p, 0.0, 4.0, 0.0, 0.0, m, layers=32)
    assert sum(titan) == pytest.approx(sum(mega))


def test_float8_all_gather_is_timed_at_one_byte(tmp_path: Path) -> None:
    # enable_fsdp_float8_all_gather gathers the float8 linear weights F of P parameters in 1
    # byte: a block gathers (2 (P - F) + F) / u bytes, as `states` keeps them gathered
    from dataclasses import replace

    job, lay = _titan(tmp_path, 64, "[parallel]\nzero_stage = 3\n", gbs=512)
    titan = job.titan.model_copy(update={"float8_all_gather": True})
    job = replace(job, torchtitan=titan)
    p, f, u = 8e9, 6e9, 32
    n_d, _ = fsdp2.shard_groups(job, lay)
    grp = comms.place(job.cluster, lay.tp, n_d)
    a = comms.all_gather((2 * (p - f) + f) / u, grp)
    r = comms.reduce_scatter(4 * p / u, grp)
    exposed, hidden = fsdp2.data_parallel_time(job, lay, p, 0.0, 0.0, 0.0, 1, u, f)
    assert exposed + hidden == pytest.approx(u * (2 * a + r))
