"""Activations a pipeline rank holds at its peak, chunk by chunk (planner.model.stage_activations).

Oracles: a brute-force walk of Megatron-LM's op order on each rank
(planner.model.schedule.op_order, itself checked against Megatron's schedule table in
tests/model/test_schedule.py): every forward adds its chunk's bytes, every backward releases its
chunk's, and the largest running sum is the peak; hand counts of the Llama 3 70B FP8 recipe's
pipeline layout."""

from __future__ import annotations

import random

import pytest

from planner.inputs.layout import Layout
from planner.inputs.pipeline_layout import parse
from planner.model.in_flight import schedule_peak
from planner.model.schedule import op_order


def brute_force(
    kept: tuple[float, ...], pp: int, vpp: int, rank: int, m: int, group: int | None = None
) -> float:
    held = peak = 0.0
    for kind, _, chunk in op_order(pp, m, vpp, rank, group):
        if kind == "F":
            held += kept[chunk]
            peak = max(peak, held)
        else:
            held -= kept[chunk]
    return peak


def test_schedule_peak_is_the_brute_force_peak() -> None:
    rng = random.Random(7)
    checked = 0
    for _ in range(300):
        pp = rng.choice([2, 3, 4, 8])
        vpp = rng.choice([1, 2, 3, 5])
        m = pp * rng.randint(1, 6) if vpp > 1 else rng.randint(1, 3 * pp)
        rank = rng.randrange(pp)
        kept = tuple(float(rng.randint(0, 5)) for _ in range(vpp))
        got = schedule_peak(kept, Layout(pp=pp, vpp=vpp), rank, m)
        assert got == brute_force(kept, pp, vpp, rank, m), (pp, vpp, rank, m, kept)
        checked += 1
    assert checked == 300


def test_schedule_peak_in_a_plans_own_group_is_the_brute_force_peak() -> None:
    # --microbatch-group-size-per-virtual-pipeline-stage g: every g the rule admits (pp <= g <=
    # m, the last group whole or of pp at least), the walk of op_order in groups of g
    rng = random.Random(11)
    checked = 0
    while checked < 300:
        pp = rng.choice([2, 3, 4])
        vpp = rng.choice([2, 3, 5])
        m = rng.randint(pp, 5 * pp)
        g = rng.randint(pp, m)
        if m % g and m % g < pp:
            continue
        rank = rng.randrange(pp)
        kept = tuple(float(rng.randint(0, 5)) for _ in range(vpp))
        lay = Layout(pp=pp, vpp=vpp, microbatch_group_size_per_vp_stage=g)
        got = schedule_peak(kept, lay, rank, m)
        assert got == brute_force(kept, pp, vpp, rank, m, g), (pp, vpp, rank, m, g, kept)
        checked += 1


def test_uneven_chunks_count_as_often_as_they_are_in_flight() -> None:
    # Llama 3 70B FP8 on 64 H100 (Megatron-Bridge llama3_70b_pretrain_64gpu_h100_fp8cs_config):
    # pp 8, vpp 5, layout Et*2|(t*2|)*34,t*3|(t*2|)*3,tL; 128 micro-batches. Rank 3 holds stages
    # 3, 11, 19, 27, 35: 2, 2, 2, 2, 3 layers. Its warm-up is 2 x (8 - 3 - 1) + 4 x 8 = 40
    # forwards: 8 micro-batches through each of chunks 0-4, and the steady state's next one is
    # chunk 0 of micro-batch 8: 8 x (2 + 2 + 2 + 2 + 3) + 2 = 90 layers' activations, where
    # (warm-up + 1) x the largest chunk would say 41 x 3 = 123.
    stages = parse("Et*2|(t*2|)*34,t*3|(t*2|)*3,tL")
    assert stages is not None
    kept = tuple(float(stages[k].count("t")) for k in range(3, 40, 8))
    assert kept == (2, 2, 2, 2, 3)
    assert schedule_peak(kept, Layout(pp=8, vpp=5), 3, 128) == 90
    assert brute_force(kept, 8, 5, 3, 128) == 90


def test_even_chunks_give_korthikantis_interleaving_factor() -> None:
    # Korthikanti et al. section 4.2.3: rank 0 holds 1 + (p - 1)/(p v) times a plain 1F1B
    # stage's p micro-batches: pp 4, vpp 2, 2 layers per chunk: 11 chunks x 2 = 22 layers
    assert schedule_peak((2.0, 2.0), Layout(pp=4, vpp=2), 0, 64) == pytest.approx(16 * (1 + 3 / 8))


@pytest.mark.parametrize("group", [4, 6])
def test_a_larger_microbatch_group_holds_more(group: int) -> None:
    # --microbatch-group-size-per-virtual-pipeline-stage: warm-up 2(pp - r - 1) + (vpp - 1) x
    # group (schedules.py get_pp_rank_microbatches): rank 0 of pp 4, vpp 2 holds 6 + group + 1
    # one-layer chunks
    lay = Layout(pp=4, vpp=2, microbatch_group_size_per_vp_stage=group)
    assert schedule_peak((1.0, 1.0), lay, 0, 24) == 6 + group + 1
