"""Receives Megatron's interleaved schedule posts before the op that needs them next, with a
micro-batch group g above pp (planner.model.early_receives, in_flight.schedule_peak's message).

Oracles: Megatron-LM d98e8a64 megatron/core/pipeline_parallel/schedules.py read by hand -- the
first rank keeps g - pp + 1 forward receive buffers, the last rank as many backward ones, every
other rank one (:1555-1563); the leading rank posts at iteration k >= pp - 1 (not the last) the
receive of the ending rank's (k - (pp - 1))-th op, unless that op is of the chunk that sends
nothing on (`recv_tensor_from_previous_stage`, :1285-1332), right after its own op k
(`pp_post_forward` :1771-1826, `pp_post_backward` :1847-1888) -- replayed below over
planner.model.schedule.op_order (checked against Megatron's table in
tests/model/test_schedule.py) with a set of pending receives; and the byte count by hand."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from planner.inputs.layout import Layout
from planner.inputs.plan import load_plan
from planner.model import in_flight
from planner.model.early_receives import early_counts
from planner.model.in_flight import schedule_peak
from planner.model.schedule import op_order
from planner.model.stage_activations import per_layer, shard, stage_activations
from planner.search.rules import check_plan


def replayed_peak(
    kept: tuple[float, ...], pp: int, vpp: int, rank: int, m: int, g: int, message: float
) -> float:
    """The most bytes rank `rank` (0 or pp - 1) holds after any op: its chunks' activations
    plus `message` per receive posted and not yet consumed, the next op's own left out."""
    kind = "F" if rank == 0 else "B"  # the direction this rank leads
    mine = [(i, c) for k, i, c in op_order(pp, m, vpp, rank, g) if k == kind]
    ending = [(i, c) for k, i, c in op_order(pp, m, vpp, pp - 1 - rank, g) if k == kind]
    step = 1 if kind == "F" else -1  # the chunk the received tensor feeds
    pending: set[tuple[int, int]] = set()
    held = peak = 0.0
    done = 0
    for k, i, c in op_order(pp, m, vpp, rank, g):
        held += kept[c] if k == "F" else -kept[c]
        if k == kind:
            pending.discard((i, c))
            if pp - 1 <= done < len(mine) - 1:
                ei, ec = ending[done - (pp - 1)]
                if 0 <= ec + step < vpp:
                    pending.add((ei, ec + step))
            done += 1
        waiting = pending - {mine[done]} if done < len(mine) else pending
        peak = max(peak, held + message * len(waiting))
    return peak


def test_the_most_early_receives_is_g_less_pp() -> None:
    # g - pp + 1 buffers (:1555-1563), one of them the next op's: pp 4 g 6 -> 2, pp 8 g 12 -> 4,
    # pp 4 g 8 -> 4; at g = pp none
    assert max(early_counts(4, 6, 12, 6)) == 2
    assert max(early_counts(8, 4, 24, 12)) == 4
    assert max(early_counts(4, 2, 8, 8)) == 4
    assert max(early_counts(4, 4, 8, 4)) == 0
    # a last group of 5 at pp 4: one more than the next op's (m 10, g 5: two groups of 5)
    assert max(early_counts(4, 3, 10, 5)) == 1


def test_schedule_peak_with_early_receives_is_the_replayed_peak() -> None:
    rng = random.Random(5)
    checked = 0
    while checked < 400:
        pp = rng.choice([2, 3, 4, 5])
        vpp = rng.choice([2, 3, 4])
        m = rng.randint(pp, 5 * pp)
        g = rng.randint(pp, m)
        if m % g and m % g < pp:  # the rule (schedules.py:1160-1168)
            continue
        rank = rng.choice([0, pp - 1])
        kept = tuple(float(rng.randint(0, 6)) for _ in range(vpp))
        message = float(rng.randint(1, 4))
        lay = Layout(pp=pp, vpp=vpp, microbatch_group_size_per_vp_stage=g)
        got = schedule_peak(kept, lay, rank, m, message=message)
        assert got == replayed_peak(kept, pp, vpp, rank, m, g, message), (pp, vpp, m, g, rank)
        checked += 1


def test_middle_ranks_hold_only_the_next_ops_receive() -> None:
    # one forward and one backward receive buffer off the first and last ranks (:1555-1563)
    lay = Layout(pp=4, vpp=3, microbatch_group_size_per_vp_stage=8)
    kept = (3.0, 1.0, 2.0)
    for rank in (1, 2):
        assert schedule_peak(kept, lay, rank, 16, message=5.0) == schedule_peak(kept, lay, rank, 16)


PLAN = """
[model]
name = "llama3.1-8b"
[cluster]
gpu = "l40s-48gb"
num_gpus = 64
[training]
seq_length = 2048
global_batch_size = 96
precision = "bf16"
[parallel]
tp = 1
pp = 4
dp = 16
vpp = 6
micro_batch_size = 1
zero_stage = 1
pipeline_layers = [8, 9, 9, 6]
microbatch_group_size_per_vp_stage = 6
"""


def test_an_8b_plan_at_group_6_holds_two_messages_more_on_the_last_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one message: s x b x h x 2 B = 2048 x 1 x 4096 x 2 = 16 MiB (tp 1, cp 1, bf16); m = 96 /
    # 16 = 6 = g: the last rank's 30 warm-up forwards (5 x 6) are followed by six forward-
    # backward pairs, before the fifth and sixth backward with 1 and 2 early gradients
    # (g - pp = 2) while 31 chunk micro-batches are held (one layer a chunk, the loss in the
    # last: the sixth pair's moment is its peak): + 32 MiB. Rank 0 runs all 36 forwards as
    # warm-up (2 x 3 + 5 x 6): at its peak, after the last, nothing waits.
    # the early receives alone: the messages every rank holds besides are left out here
    # (tests/model/test_p2p_held.py checks the two together)
    monkeypatch.setattr(in_flight, "held_counts", lambda *_: ())
    monkeypatch.setattr("planner.model.stage_activations.transient", lambda *_: 0)
    monkeypatch.setattr("planner.model.stage_activations._PEAKS", {})
    path = tmp_path / "plan.toml"
    path.write_text(PLAN)
    plan = check_plan(load_plan(path))
    job, lay = plan.job, plan.require_layout()
    sh = shard(job, lay)
    per = per_layer(job.arch, sh)
    ranks = lay.chunk_layers(job.arch.num_layers)
    with_early = [stage_activations(job, lay, r, ranks[r], sh, per) for r in (0, 3)]
    monkeypatch.setattr(in_flight, "early_counts", lambda *_: (0,))
    monkeypatch.setattr("planner.model.stage_activations._PEAKS", {})
    without = [stage_activations(job, lay, r, ranks[r], sh, per) for r in (0, 3)]
    assert with_early[0] - without[0] == 0
    assert with_early[1] - without[1] == 2 * 2048 * 4096 * 2
