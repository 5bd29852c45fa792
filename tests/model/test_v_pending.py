"""A pending W's stash under torch's V schedules (ZBVZeroBubble, DualPipeV): the peak walked with
it (`in_flight.schedule_peak`, `v_schedule.held_peak`), the ranks memory asks (every one), and
the stash counted for a V plan (`stage_activations`).

Oracles: pytorch/pytorch torch/distributed/pipelining (the torch torchtitan b5bcd76c runs):
schedules.py's runtime runs a BACKWARD_INPUT action as `stage.backward_one_chunk(full_backward=
False)`, which keeps the stage output and the param_groups whose prehooks stored every
parameter-owning node's output gradient (_backward.py `stage_backward_input`) until the W's
`backward_weight_one_chunk`; a FULL_BACKWARD action, DualPipeV's overlapped backward included
(`ScheduleDualPipeV._calculate_single_rank_operations`' `add_overlap_f_b` makes its sub-action a
FULL_BACKWARD), runs whole. Each rank's order is torch's (`v_schedule.rank_order`, checked against
schedules.py in tests/cli/test_timeline_v.py), walked here by brute force: live sets of chunk
micro-batches, each holding kept[c] from its forward to its B or W and pending[c] from its I to
its W."""

from __future__ import annotations

import random
import tomllib

import pytest
from plan_text import titan_pp2_vpp2

from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.model import memory, stage_activations
from planner.model.in_flight import schedule_peak
from planner.model.stage_activations import activation_parts, per_layer, shard
from planner.model.v_schedule import rank_order
from planner.search.rules import check_plan

V = ("ZBVZeroBubble", "DualPipeV")


def _walk(
    name: str, pp: int, m: int, rank: int, kept: tuple[float, ...], pending: tuple[float, ...]
) -> float:
    """Brute force (module docstring): the bytes live after each action of torch's order."""
    live: list[set[int]] = [set(), set()]
    stashed: list[set[int]] = [set(), set()]
    peak = 0.0
    for step in rank_order(name, pp, m, rank):
        for a in step:
            if a.kind == "F":
                live[a.chunk].add(a.micro)
            elif a.kind == "I":
                stashed[a.chunk].add(a.micro)
            elif a.kind == "W":
                live[a.chunk].remove(a.micro)
                stashed[a.chunk].remove(a.micro)
            else:  # a whole backward
                live[a.chunk].remove(a.micro)
            now = sum(kept[c] * len(live[c]) + pending[c] * len(stashed[c]) for c in (0, 1))
            peak = max(peak, now)
    return peak


def _ms(name: str, pp: int) -> range:
    return range(1 if name == "ZBVZeroBubble" else 2 * pp, 4 * pp + 2)


@pytest.mark.parametrize("name", V)
def test_v_peak_with_the_stash_is_the_walk(name: str) -> None:
    """Every rank, every m torch runs up to 4 pp + 1, random bytes: `schedule_peak` with the
    stash is the walk's peak (before, the stash was not counted under the V schedules)."""
    rng = random.Random(23)
    for pp in range(2, 8):
        lay = Layout(tp=1, pp=pp, dp=1, vpp=2, v_stages=True)
        for m in _ms(name, pp):
            for r in range(pp):
                kept = (rng.uniform(0.2, 3.0), rng.uniform(0.2, 3.0))
                pend = (rng.uniform(0.1, 4.0), rng.uniform(0.1, 4.0))
                got = schedule_peak(kept, lay, r, m, name, pending=pend)
                assert got == pytest.approx(_walk(name, pp, m, r, kept, pend), rel=1e-12)


def test_by_hand() -> None:
    """pp 2, m 4, rank 1, kept 1 per chunk micro-batch, a stash of 10.

    ZB-V (n = max(2 pp - 1, m) = 4): warm-up 2 (pp - r) - 1 = 1 chunk-0 forward, r = 1 pair
    (F1, F0), pp - r = 1 trio (F1, I1, W1); two steady rounds (F0 I0 W0 F1 I1 W1) leave chunk 0
    micro-batches 2 and 3 and chunk 1's 3 in flight; the cool-down runs I2c0, I3c1 (its r
    pairs), then I3c0 before its first W: 3 micro-batches (3) and 3 stashes (30): 33, where the
    activations alone peak at 4 (v_in_flight's (2, 2) and (3, 1)).
    DualPipeV: step 2's (F0, F1) twice, step 4 twice (the last rank's first F2c0 and B0c1 apart,
    then overlapped pairs), each backward whole; step 6 (r + 1 = 2 rounds, the middle i = 1 on
    an odd rank from chunk 1's) B2c1 B2c0 I3c1 I3c0: 2 micro-batches (2) and 2 stashes (20):
    22, where the activations alone peak at 5 (step 4's forward: 2 pp - r = 3 and r + 1 = 2)."""
    lay = Layout(tp=1, pp=2, dp=1, vpp=2, v_stages=True)
    ones, tens = (1.0, 1.0), (10.0, 10.0)
    zbv = [f"{a.kind}{a.micro}c{a.chunk}" for (a,) in rank_order("ZBVZeroBubble", 2, 4, 1)]
    assert zbv[-6:] == ["I2c0", "I3c1", "I3c0", "W2c0", "W3c1", "W3c0"]
    assert schedule_peak(ones, lay, 1, 4, "ZBVZeroBubble") == 4.0
    assert schedule_peak(ones, lay, 1, 4, "ZBVZeroBubble", pending=tens) == 33.0
    assert schedule_peak(ones, lay, 1, 4, "DualPipeV") == 5.0
    assert schedule_peak(ones, lay, 1, 4, "DualPipeV", pending=tens) == 22.0


def test_a_middle_rank_can_hold_the_most() -> None:
    """Why memory asks every rank of a V (`memory._peak_candidates`): DualPipeV, pp 4, m 8,
    chunk micro-batches keeping (1, 2), stashes (0, 3). Step 3 (I1, its W, F1; pp - r - 1 times,
    none on the last rank) holds 2 pp - 1 - r chunk-0 and r + 1 chunk-1 micro-batches and one
    chunk-1 stash: 7 - r + 2 (r + 1) + 3 = 12 + r on ranks 0 to 2; step 4's first forward holds
    2 pp - r and r + 1: 8 - r + 2 (r + 1) = 10 + r, rank 3's 13; so ranks 1 to 3 (alike but
    for their place) hold 13, 14 and 13, the middle one the most (brute force below agrees).
    A pp 8 V plan's candidates are then all eight ranks (before: 0, 1, 2 and 7)."""
    walked = [_walk("DualPipeV", 4, 8, r, (1.0, 2.0), (0.0, 3.0)) for r in range(4)]
    assert walked == [12.0, 13.0, 14.0, 13.0]
    text = titan_pp2_vpp2("DualPipeV", "selective").replace("\npp = 2\n", "\npp = 8\n")
    text = text.replace("zero_stage = 3", "zero_stage = 0")  # dp 1: torchtitan replicates
    plan = check_plan(parse_plan(tomllib.loads(text)))
    job, lay = plan.job, plan.require_layout()
    chunks = lay.chunk_layers(job.arch.num_layers)
    assert memory._peak_candidates(job, lay, chunks) == tuple(range(8))


@pytest.mark.parametrize("name", V)
def test_a_v_plan_counts_the_stash(name: str) -> None:
    """Llama 3.1 8B pp 2 x vpp 2 under `name`, selective AC: each rank's activations are its
    peak walked with the stash (`chunk_pending`, hand-checked in tests/model/test_pending_w.py)
    on top of what the rank holds besides (the same whatever the walk: the estimate less the walk
    without the stash); rank 1 of ZB-V holds at least one chunk-0 stash more than before."""
    plan = check_plan(parse_plan(tomllib.loads(titan_pp2_vpp2(name, "selective"))))
    job, lay = plan.job, plan.require_layout()
    sh = shard(job, lay)
    per = per_layer(job.arch, sh)
    chunks = lay.chunk_layers(job.arch.num_layers)
    m = lay.num_microbatches(job.global_batch_size)
    for r in (0, 1):
        parts = activation_parts(job, lay, r, chunks[r], sh, per)
        assert len(parts.pending) == 2 and all(p > 0 for p in parts.pending)
        with_w = _walk(name, 2, m, r, parts.kept, parts.pending)
        without = _walk(name, 2, m, r, parts.kept, (0.0, 0.0))
        whole = stage_activations.stage_activations(job, lay, r, chunks[r], sh, per)
        bare = stage_activations.peak_bytes(job, lay, r, sh, per, parts._replace(pending=()))
        assert whole - with_w == pytest.approx(bare - without, rel=1e-12)
        if name == "ZBVZeroBubble" and r == 1:
            assert with_w >= without + parts.pending[0]
