"""Megatron-FSDP's ZeRO 2 (optim_grads) and ZeRO 3 (optim_grads_params): per-unit traffic every
micro-batch, forced overlaps, and the unit buffers alive at the peak.

Oracles (NVIDIA/Megatron-LM d98e8a64, megatron/core/distributed/fsdp/):
- src/megatron_fsdp/megatron_fsdp.py:761-787: `grad_reduce_every_bprop` for "optim_grads" and
  "optim_grads_params": each unit's gradients are reduce-scattered in every backward, not once
  on the last micro-batch ("With gradient-sharding strategies, gradient reduction occurs on
  every backward propagation", :734-735);
- megatron_fsdp.py:328-333: optim_grads_params sets overlap_param_gather, and optim_grads /
  optim_grads_params set overlap_grad_reduce, whatever the command line says;
- mcore_fsdp_adapter.py:163-171: every TransformerLayer is an FSDP unit; src/megatron_fsdp/
  param_and_grad_buffer.py:1858-1866: the bucket size splits only parameters outside units;
  :3107-3111 the backward fetches a unit's gradient bucket whole; the queue and the prefetch
  window as tests/model/test_megatron_fsdp_buffers.py cites them.
The expected seconds are hand arithmetic on planner.model.comms' collectives (tested against
nccl-tests' bus-bandwidth factors in tests/model/test_comms.py), the bytes hand arithmetic on
the models' shapes.
"""

from __future__ import annotations

import pytest
from jobs import h100_cluster

from planner.inputs.layout import Layout
from planner.inputs.plan import Plan, parse_plan
from planner.model import comms, dp_sync, megatron_fsdp

# 32 units of 1e8 parameters over 8 H100 (one node), bf16 gradients and weights
U, N, M = 32, 32 * 1e8, 16
FWD, BWD = 0.1, 0.2  # one micro-batch's forward and backward on the stage


def _zero(zero: int, **kw: bool) -> tuple[Layout, tuple[comms.Group, comms.Group]]:
    lay = Layout(tp=1, pp=1, dp=8, zero_stage=zero).with_(**kw)  # type: ignore[arg-type]
    return lay, dp_sync.data_parallel_groups(h100_cluster(8), lay)


def _traffic(lay: Layout, groups: tuple[comms.Group, comms.Group], m: int) -> tuple[float, float]:
    return dp_sync.data_parallel(groups, lay, N, 0.0, 2.0, FWD, BWD, m, layers=U)


def test_zero2_reduce_scatters_every_unit_every_micro_batch() -> None:
    """By hand: per unit rs = reduce_scatter(1e8 x 2 B), ag = all_gather(1e8 x 2 B); every
    micro-batch's backward reduce-scatters the 32 units, each under the next unit's backward
    (BWD / 32 each): rs + 31 max(rs - BWD / 32, 0) shows; once a step the updated shards are
    gathered under the first forward: ag + 31 max(ag - FWD / 32, 0). In all m 32 rs + 32 ag
    seconds of traffic. (Before: Megatron DDP's buckets once a step, the same at m 1 and 16.)"""
    lay, groups = _zero(2)
    rs = comms.reduce_scatter(1e8 * 2.0, groups[0])
    ag = comms.all_gather(1e8 * 2.0, groups[0])
    exposed, hidden = _traffic(lay, groups, M)
    shown = M * (rs + 31 * max(rs - BWD / U, 0.0)) + ag + 31 * max(ag - FWD / U, 0.0)
    assert exposed == pytest.approx(shown)
    assert exposed + hidden == pytest.approx(M * U * rs + U * ag)
    one = sum(_traffic(lay, groups, 1))
    assert exposed + hidden - one == pytest.approx((M - 1) * U * rs)


def test_fsdp_forces_the_overlaps_on() -> None:
    """megatron_fsdp.py:328-333: at ZeRO 2 and 3 the reduce-scatters overlap whatever
    overlap_grad_reduce says, at ZeRO 3 the gathers whatever overlap_param_gather says: the
    same seconds as with both on. At ZeRO 2 the once-a-step gather keeps the flag: without it
    all 32 unit gathers show, 32 ag (start_param_sync's synchronous gather, :1321-1323)."""
    for zero in (2, 3):
        on = _traffic(*_zero(zero), M)
        off = _traffic(*_zero(zero, overlap_grad_reduce=False, overlap_param_gather=False), M)
        if zero == 3:
            assert off == pytest.approx(on)
    lay, groups = _zero(2, overlap_grad_reduce=False, overlap_param_gather=False)
    rs = comms.reduce_scatter(1e8 * 2.0, groups[0])
    ag = comms.all_gather(1e8 * 2.0, groups[0])
    shown = M * (rs + 31 * max(rs - BWD / U, 0.0)) + U * ag
    assert _traffic(lay, groups, M)[0] == pytest.approx(shown)


def _plan(zero: int, tp: int, pp: int) -> tuple[Plan, Layout]:
    plan = parse_plan(
        {
            "model": {"name": "llama3.1-70b"},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 64},
            "training": {"seq_length": 8192, "global_batch_size": 256, "precision": "bf16"},
            "parallel": {"tp": tp, "pp": pp, "micro_batch_size": 1, "zero_stage": zero},
        }
    )
    return plan, plan.require_layout()


# Llama 3.1 70B at tp 8: a decoder layer's 2 x 8,192^2 (q, o) + 2 x 8,192 x 1,024 (k, v)
# + 3 x 8,192 x 28,672 (gate, up, down) = 855,638,016 split 8 ways, and its two norms
# (2 x 8,192, whole on every TP rank): 106,971,136; the output layer's 128,256 rows padded to
# a multiple of 128 x 8 (129,024) x 8,192 / 8 = 132,120,576, with the final norm's 8,192.
# Buckets are padded to multiples of the data-parallel ranks x h (param_and_grad_buffer.py:
# 285-288, `megatron_fsdp.padded`): at dp 2, 16,384 (a layer is 6,529 of them; the output side
# 8,065); at dp 8 (pp 1), 65,536 (a layer 1,633; the output side 2,017; the embedding 2,016).
LAYER, OUTPUT = 106_971_136, 132_120_576
TAIL = OUTPUT + 8_192
TAIL_PAD2, LAYER_PAD8, TAIL_PAD8 = 8_065 * 16_384, 1_633 * 65_536, 2_017 * 65_536


@pytest.mark.parametrize("zero", [2, 3])
def test_unit_buffers_at_the_peak(zero: int) -> None:
    """By hand (megatron_fsdp.py:420-444; param_and_grad_buffer.py:3935-3948, :4487-4510):
    20 layers a rank, C = max(1e9, 2 x LAYER) = 1e9 at ZeRO 3 and max(1e9, 40M) at ZeRO 2,
    P = 5e8: 4 LAYER < P <= 5 LAYER, so a unit with five below holds 6 LAYER gathered (bf16,
    2 B; ZeRO 3 only). Queue (fp32 gradients, 4 B): a middle rank's 10 queued (9 LAYER <= C <
    10 LAYER) and its own, 11 LAYER from the eleventh unit, which has 9 below (6 gathered).
    The last rank's output-layer bucket TAIL goes first: TAIL + k LAYER queued until
    TAIL + 9 LAYER > C pops it, so its tenth unit holds TAIL + 10 LAYER (more than 11 LAYER),
    6 gathered. (Before: two decoder layers, or the output layer and one, at 4 + 2 B.)"""
    plan, lay = _plan(zero, 8, 4)
    job = plan.job
    gathered = 6 * LAYER * 2.0 if zero == 3 else 0.0
    assert job.grad_bytes == 4.0
    assert LAYER == 6_529 * 16_384
    for rank, queued in ((3, TAIL_PAD2 + 10 * LAYER), (1, 11 * LAYER)):
        chunks = lay.chunk_layers(job.arch.num_layers)[rank]
        transient, kept = megatron_fsdp.transient_and_resident(job, lay, rank, chunks)
        assert transient == pytest.approx(queued * 4.0 + gathered)
        # ZeRO 3 keeps the output layer and final norm gathered all step (2 B)
        assert kept == pytest.approx(TAIL * 2.0 if zero == 3 and rank == 3 else 0.0)


def test_zero1_has_no_unit_buffers() -> None:
    """Megatron's distributed optimizer (ZeRO 1) keeps whole gradient buffers, no transient."""
    plan, lay = _plan(1, 8, 4)
    chunks = lay.chunk_layers(plan.job.arch.num_layers)[3]
    assert megatron_fsdp.transient_and_resident(plan.job, lay, 3, chunks) == (0.0, 0.0)


# Llama 3.1 70B at tp 8, pp 1: the parameters outside units are the word embedding and the
# output layer (untied), each 132,120,576 (above), and the final norm's 8,192 (whole on every
# TP rank): 264,249,344.
EDGES = 2 * OUTPUT + 8_192


@pytest.mark.parametrize("zero", [2, 3])
def test_no_bucket_size_without_grad_reduce_overlap(zero: int) -> None:
    """Without --overlap-grad-reduce Megatron-LM resolves the bucket size to None (d98e8a64
    training.py:2192-2193), before Megatron-FSDP forces the overlap on (megatron_fsdp.py:
    330-333); a None size closes no bucket (param_and_grad_buffer.py:1860-1864), so the
    embedding, the output layer and the final norm are one bucket, allocated at the output
    layer's gradient and reduced after the embedding's: EDGES alive beside the queue's 11 LAYER
    (80 units, as `test_unit_buffers_at_the_peak`'s middle rank). With the overlap: the output
    side's bucket first (TAIL + 10 LAYER, as the last rank there), the embedding's last."""
    plan, lay = _plan(zero, 8, 1)
    job = plan.job
    chunks = lay.chunk_layers(job.arch.num_layers)[0]
    gathered = 6 * LAYER_PAD8 * 2.0 if zero == 3 else 0.0
    for size in (None, 50_000_000):
        on = lay.with_(overlap_grad_reduce=True, ddp_bucket_size=size)
        off = lay.with_(overlap_grad_reduce=False, ddp_bucket_size=size)
        got_on = megatron_fsdp.transient_and_resident(job, on, 0, chunks)[0]
        got_off = megatron_fsdp.transient_and_resident(job, off, 0, chunks)[0]
        assert got_on == pytest.approx((TAIL_PAD8 + 10 * LAYER_PAD8) * 4.0 + gathered)
        held = OUTPUT + TAIL_PAD8  # the embedding (2,016 x 65,536) and the output side, padded
        assert got_off == pytest.approx((held + 11 * LAYER_PAD8) * 4.0 + gathered)
