"""The activations a rank of torchtitan's InterleavedZeroBubble holds at its peak
(planner.model.in_flight `in_flight` / `schedule_peak` under `DEFERRED_W`), and the ranks of a V
schedule that can hold the peak below 2 pp - 1 micro-batches (memory asks every rank of a V).

Oracle: each rank's actions in torch's order (pytorch/pytorch 00722e64
torch/distributed/pipelining/schedules.py ScheduleInterleavedZeroBubble, rebuilt in
`looped_order.rank_order` and checked against a restatement with torch's own counters in
tests/model/test_looped_order.py), walked action by action: a forward adds its chunk
micro-batch's activations and its W releases them (stage.py `backward_one_chunk(full_backward=
False)` keeps the stage's input values, output and param_groups in `backward_state` until
`backward_weight_one_chunk`, and _backward.py `stage_backward_input` computes the input
gradients with retain_graph=True, so the I frees none of the graph's saved tensors; the first
stage computes nothing at I). The V schedules' counts are checked against their own walk in
tests/model/test_v_in_flight.py; here a brute force over every rank."""

from __future__ import annotations

import random
import tomllib

import pytest
from plan_text import titan_job

from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.model import memory
from planner.model.in_flight import in_flight, schedule_peak
from planner.model.looped_order import per_round, rank_order
from planner.model.torch_schedules import refusal
from planner.search.rules import check_plan

ZB = "InterleavedZeroBubble"


def _walk(pp: int, v: int, m: int, rank: int, kept: tuple[float, ...], free: str) -> float:
    """The most activation bytes rank `rank` holds at once in torch's order (module docstring),
    each chunk micro-batch released at `free` ("W", as torch does, or "I")."""
    live: set[tuple[int, int]] = set()
    peak = 0.0
    for kind, micro, chunk in rank_order(ZB, pp, v, m, rank):
        if kind == "F":
            live.add((micro, chunk))
        elif kind == free:
            live.remove((micro, chunk))
        peak = max(peak, sum(kept[c] for _, c in live))
    return peak


def test_peak_is_the_walk_of_torchs_order() -> None:
    """Every rank, every m torch runs (`torch_schedules.refusal`) up to 4 pp + 1, v 2 to 4,
    random bytes per chunk; the group torch's micro-batches per round (`per_round`, as
    `torch_schedules.microbatch_group` passes it); with equal chunks the count is
    min((v - 1) g + pp, m v), the same on every rank."""
    rng = random.Random(29)
    for pp in range(2, 7):
        for v in range(2, 5):
            lay = Layout(tp=1, pp=pp, dp=1, vpp=v)
            for m in range(1, 4 * pp + 2):
                if refusal(ZB, pp, m):
                    continue
                g = per_round(pp, m)
                for r in range(pp):
                    kept = tuple(rng.uniform(0.2, 3.0) for _ in range(v))
                    got = schedule_peak(kept, lay, r, m, ZB, g)
                    assert got == pytest.approx(_walk(pp, v, m, r, kept, "W"), rel=1e-12)
                    count = in_flight(lay, r, m, g, ZB)
                    assert count == _walk(pp, v, m, r, (1.0,) * v, "W"), (pp, v, m, r)
                    assert count == min((v - 1) * g + pp, m * v)


def test_pp4_vpp2_m8_by_hand() -> None:
    """pp 4, v 2, m 8: one round... two rounds of g = 8 // 2 = 4. Rank r runs
    (v - 1) g + pp - 1 - r = 7 - r warm-up forwards, then F and I a step, a W after the I from
    its r-th on: rank 3 holds 4, then 5, 6, 7 after steps 0-2 (no W yet), 8 after step 3's F
    before its W; rank 0 holds 7, 8 after step 0's F, 7 after its W. Every rank 8, where
    interleaved 1F1B's count (v - 1) g + 2 (pp - 1 - r) + 1 says 11, 9, 7, 5 (and freeing at
    I would hold 5 on rank 3: 4 warm-up forwards, each steady F then its I)."""
    lay = Layout(tp=1, pp=4, dp=1, vpp=2)
    assert [in_flight(lay, r, 8, 4, ZB) for r in range(4)] == [8, 8, 8, 8]
    assert [in_flight(lay, r, 8, 4, "Interleaved1F1B") for r in range(4)] == [11, 9, 7, 5]
    assert schedule_peak((1.0, 1.0), lay, 3, 8, ZB, 4) == 8.0
    assert _walk(4, 2, 8, 3, (1.0, 1.0), "I") == 5.0


def test_memory_fast_path_finds_a_middle_ranks_peak() -> None:
    """A ZB-V plan (pp 5, torchtitan) whose ranks 1-4 hold a 6-layer chunk 0 and a 1-layer
    chunk 1 ("Et*2|t*6|t*6|t*6|t*6|t|t|t|t|t*2L": stages r and 9 - r on rank r); each m from
    1 to 11 (the global batch, dp 1): the stages `memory.estimate` asks on the search's fast
    path find the peak of all of them (brute force); at m 7 the peak is on rank 2 or 3 (in
    `v_in_flight`'s counts, 7 x 6 + 3 x 1 = 45 and 7 x 6 + 4 x 1 = 46 layers' activations against
    rank 1's 7 x 6 + 2 = 44 and rank 4's max(5 x 6 + 5, 6 x 6 + 4) = 40)."""
    split = 'pipeline_model_parallel_layout = "Et*2|t*6|t*6|t*6|t*6|t|t|t|t|t*2L"\n'
    parallel = f"[parallel]\npp = 5\nvpp = 2\nzero_stage = 0\n{split}"
    schedule = '[torchtitan]\npipeline_schedule = "ZBVZeroBubble"\n'
    for m in range(1, 12):
        text = titan_job(gbs=m, num_gpus=5) + parallel + schedule
        plan = check_plan(parse_plan(tomllib.loads(text)))
        job, lay = plan.job, plan.require_layout()
        assert lay.v_stages and lay.pp == 5
        whole = memory.estimate(job, lay)
        assert memory.estimate(job, lay, all_stages=False).peak == whole.peak, m
        if m == 7:
            assert whole.worst.stage in (2, 3)
