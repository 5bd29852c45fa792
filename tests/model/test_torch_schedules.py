"""torch.distributed.pipelining's schedules as torchtitan runs them: bubble and micro-batches in
flight (planner.model.schedule.schedule_bubble, planner.model.in_flight.schedule_peak).

Oracles: a brute-force timing of each op (1F1B through `schedule.simulate`, GPipe through the
small event loop below); the cited closed forms by hand (ZB-H1 / ZB1P (p-1)(F+B-2W), Qi et al.
2024 and the DualPipe README's table; ZB-V zero at F = B - W = W; DualPipe's
(PP/2-1)(F&B+B-3W) over 2p half-stage chunks); in-flight counts by hand."""

from __future__ import annotations

import random
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run
from plan_text import plan_text, write

from planner.inputs.layout import Layout
from planner.inputs.plan import Job, load_plan, parse_plan
from planner.model import cost, memory, schedule
from planner.model.in_flight import schedule_peak, v_in_flight
from planner.model.looped_order import looped_step
from planner.model.schedule import schedule_bubble
from planner.model.torch_schedules import microbatch_group
from planner.model.v_schedule import simulate_v
from planner.search import rules
from planner.search.rules import check_plan

# the hand example: p = 4 stages, F = 1, B = 2 (whole backward), no recompute: W = 1
P, F, B = 4, 1.0, 2.0
EQUAL = [(F, B)] * P
NO_REC = [0.0] * P


def _gpipe_makespan(pp: int, m: int, f: float, b: float) -> float:
    """Every forward, then every backward (last micro-batch first), each op when its rank is free
    and its input has arrived: a brute-force timing of GPipe."""
    fend = [[0.0] * m for _ in range(pp)]
    clock = [0.0] * pp
    for i in range(m):
        for r in range(pp):
            start = max(clock[r], fend[r - 1][i] if r else 0.0)
            fend[r][i] = clock[r] = start + f
    bend = [[0.0] * m for _ in range(pp)]
    for i in reversed(range(m)):
        for r in reversed(range(pp)):
            ready = bend[r + 1][i] if r < pp - 1 else fend[r][i]
            start = max(clock[r], ready)
            bend[r][i] = clock[r] = start + b
    return max(clock)


@pytest.mark.parametrize("m", [4, 8, 16])
def test_one_f_one_b_and_gpipe_against_brute_force(m: int) -> None:
    ideal = m * (F + B)
    sim = schedule.simulate(P, m, F, B)
    makespan = max(op.end for rank in sim for op in rank)
    assert schedule_bubble("1F1B", EQUAL, NO_REC) == pytest.approx(makespan - ideal)
    assert schedule_bubble("GPipe", EQUAL, NO_REC) == pytest.approx(
        _gpipe_makespan(P, m, F, B) - ideal
    )


def test_interleaved_matches_pipeline_time_on_uneven_stages() -> None:
    stages = [(1.0, 2.0), (1.5, 2.5), (0.7, 1.9), (1.2, 2.2)]
    times = [f + b for f, b in stages]
    for name, vpp in (("1F1B", 1), ("Interleaved1F1B", 2), ("Interleaved1F1B", 4)):
        _, want = schedule.pipeline_time(times, 8, vpp)
        assert schedule_bubble(name, stages, NO_REC, vpp) == pytest.approx(want)


def test_each_schedule_by_hand() -> None:
    # p - 1 = 3; F + B = 3; W = 1
    want = {
        ("1F1B", 1): 9.0,
        ("GPipe", 1): 9.0,
        ("Interleaved1F1B", 2): 4.5,
        ("LoopedBFS", 2): 4.5,
        ("InterleavedZeroBubble", 2): 3 * (1 + 2 - 2) / 2,  # 1.5
        # torch's order leaves (p - 1) chunk forwards idle at F = I = W (B - W = 1 here):
        # 3 x 1/2 (tests/model/test_zbv_bubble.py times the order itself)
        ("ZBVZeroBubble", 2): 1.5,
        ("DualPipeV", 2): 3 * (1 + 2 * 2 - 3) / 2,  # (PP/2-1)(F&B+B-3W), half chunks: 3
    }
    for (name, vpp), bubble in want.items():
        assert schedule_bubble(name, EQUAL, NO_REC, vpp) == pytest.approx(bubble), name
    # recompute belongs to the input-gradient part: W = (B - R) / 2
    rec = [0.5] * P
    assert schedule_bubble("InterleavedZeroBubble", EQUAL, rec, 2) == pytest.approx(
        3 * (1 + 2 - 2 * 0.75) / 2
    )


def test_in_flight_by_hand() -> None:
    lay = Layout(tp=1, pp=4, dp=1, vpp=2)
    kept = (1.0, 10.0)
    # ZB-V: 2p = 8 half-stage chunks (1F1B's p stages); DualPipeV PP + 1 = 9
    # (its warm-up's end, and a steady chunk-0 forward before its I: tests/model/
    # test_v_in_flight.py walks torch's order)
    assert v_in_flight("ZBVZeroBubble", 4, 0, 64) == ((7, 1), (8, 0))
    assert v_in_flight("ZBVZeroBubble", 4, 3, 64) == ((4, 4), (5, 3))
    assert v_in_flight("DualPipeV", 4, 0, 64) == ((8, 1),)
    assert schedule_peak(kept, lay, 0, 64, "ZBVZeroBubble") == pytest.approx(7 + 10)
    assert schedule_peak(kept[::-1], lay, 0, 64, "ZBVZeroBubble") == pytest.approx(8 * 10)
    assert schedule_peak(kept, lay, 0, 64, "DualPipeV") == pytest.approx(8 + 10)
    assert v_in_flight("DualPipeV", 4, 0, 3) == ((3, 1),)  # at most m
    # GPipe / LoopedBFS: every forward before the first backward
    assert schedule_peak((2.0,), Layout(tp=1, pp=4, dp=1), 0, 16, "GPipe") == pytest.approx(32)
    assert schedule_peak(kept, lay, 0, 16, "LoopedBFS") == pytest.approx(16 * 11)
    # InterleavedZeroBubble holds each chunk micro-batch until its W (tests/model/
    # test_zb_in_flight.py walks torch's order): (v - 1) g + pp - 1 = 7 forwards, chunks
    # 0000 111 (34), the next one (chunk 1) 44 before the W of backward 0 (chunk 1) frees 10;
    # each later step adds forward 7 + j and frees backward j (its chunk mirrored), the
    # table's chunks in fours: 44 again at j = 8, never more (interleaved 1F1B: 10 warm-up
    # forwards 0000 1111 00 hold 46, the next one (chunk 0) 47)
    assert schedule_peak(kept, lay, 0, 16, "InterleavedZeroBubble") == pytest.approx(44)
    assert schedule_peak(kept, lay, 0, 16, "Interleaved1F1B") == pytest.approx(47)


TITAN = "[training]\nframework = 'torchtitan'\nseq_length = 8192\nglobal_batch_size = 64\n"


def _plan(tmp_path: Path, vpp: int, name: str) -> tuple[Job, Layout]:
    par = f"[parallel]\npp = 4\nvpp = {vpp}\nzero_stage = 3\n"
    extra = f'[torchtitan]\npipeline_schedule = "{name}"\n'
    plan = check_plan(load_plan(write(tmp_path, plan_text(training=TITAN, parallel=par) + extra)))
    return plan.job, plan.require_layout()


def test_torchtitan_plans_rank_their_schedules(tmp_path: Path) -> None:
    bubble, peak = {}, {}
    for name, vpp in (
        ("1F1B", 1),
        ("GPipe", 1),
        ("Interleaved1F1B", 2),
        ("InterleavedZeroBubble", 2),
        ("ZBVZeroBubble", 2),
        ("DualPipeV", 2),
    ):
        job, lay = _plan(tmp_path, vpp, name)
        bubble[name] = cost.estimate(job, lay).breakdown.bubble
        peak[name] = max(st.activations for st in memory.estimate(job, lay).stages)
    assert bubble["GPipe"] == pytest.approx(bubble["1F1B"])
    # ZB-V and ZB1P both leave about (p - 1) F / 2 here (test_zbv_bubble.py), under 1F1B's
    assert bubble["ZBVZeroBubble"] < bubble["Interleaved1F1B"]
    assert bubble["InterleavedZeroBubble"] < bubble["Interleaved1F1B"]
    assert bubble["Interleaved1F1B"] < bubble["1F1B"]
    assert peak["GPipe"] > 2 * peak["1F1B"]  # m = 16 in flight against at most p = 4


def test_explain_names_the_schedule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    par = "[parallel]\npp = 4\nvpp = 2\nzero_stage = 3\n"
    extra = '[torchtitan]\npipeline_schedule = "ZBVZeroBubble"\n'
    path = write(tmp_path, plan_text(training=TITAN, parallel=par) + extra)
    job, lay = _plan(tmp_path, 2, "ZBVZeroBubble")
    bubble = cost.estimate(job, lay).breakdown.bubble
    code, out, err = run(["explain", str(path)], capsys)
    assert code == 0, err
    at = out.index("pipeline schedule:")
    text = " ".join(out[at:].split())  # rich wraps the long formula
    assert "torchtitan's ZBVZeroBubble" in text and "max(max(F,I)+(p-2)W" in text
    assert f"= {bubble * 1e3:,.0f} ms" in text


def broken(job: Job, lay: Layout) -> dict[str, rules.Violation]:
    return {v.rule: v for v in rules.violations(job, lay)}


def _torch_interleaved_peak(kept: tuple[float, ...], pp: int, rank: int, m: int) -> float:
    """The most activation bytes rank `rank` holds under torch's ScheduleInterleaved1F1B, its op
    order built from the formulas torch/distributed/pipelining/schedules.py (00722e64) documents:
    rounds = max(1, m // pp), per round m // rounds micro-batches; warm-up forwards
    min((v - 1) x per_round + 2 (pp - 1 - rank), m v); forward op k runs chunk
    (k // per_round) % v, backward op k (counted from the warm-up's end) chunk
    v - 1 - (k // per_round) % v; one forward then one backward in the steady state."""
    v = len(kept)
    per_round = m // max(1, m // pp)
    warm = min((v - 1) * per_round + 2 * (pp - 1 - rank), m * v)
    fwd = [kept[(k // per_round) % v] for k in range(m * v)]
    bwd = [kept[v - 1 - (k // per_round) % v] for k in range(m * v)]
    held = sum(fwd[:warm])
    peak = held
    for k in range(m * v - warm):
        held += fwd[warm + k]
        peak = max(peak, held)
        held -= bwd[k]
    return peak


TITAN_4K = "[training]\nframework = 'torchtitan'\nseq_length = 4096\n"


def _titan_layout(pp: int, vpp: int, m: int, name: str) -> tuple[Job, Layout]:
    text = plan_text(
        cluster=f'[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = {pp}\n',
        training=f"{TITAN_4K}global_batch_size = {m}\n",
        parallel=f"[parallel]\npp = {pp}\nvpp = {vpp}\nzero_stage = 0\n",
    )
    plan = parse_plan(tomllib.loads(text + f'[torchtitan]\npipeline_schedule = "{name}"\n'))
    return plan.job, plan.require_layout()


def test_interleaved_rounds_peak_against_torch_order() -> None:
    """Under torchtitan, Interleaved1F1B holds what torch's own op order holds with its rounds:
    m = 10 at pp 4 runs 2 rounds of 5 (Megatron's groups of pp would refuse it), m = 6 one round
    of 6; on random uneven chunks, every rank, against `_torch_interleaved_peak`."""
    rng = random.Random(7)
    checked = 0
    for pp in (2, 3, 4, 6):
        for vpp in (2, 3, 4):
            for m in range(pp, 5 * pp + 1):
                if m % max(1, m // pp):
                    continue  # torch raises (test_torch_refusals)
                job, lay = _titan_layout(pp, vpp, m, "Interleaved1F1B")
                group = microbatch_group(job, lay)
                assert group == m // max(1, m // pp)
                for rank in range(pp):
                    kept = tuple(rng.uniform(1.0, 3.0) for _ in range(vpp))
                    ours = schedule_peak(kept, lay, rank, m, "Interleaved1F1B", group)
                    assert ours == pytest.approx(_torch_interleaved_peak(kept, pp, rank, m))
                    checked += 1
    assert checked > 300


@pytest.mark.parametrize(
    ("name", "pp", "m", "torch_raises"),
    [
        # Interleaved1F1B / InterleavedZeroBubble: m % max(1, m // pp) != 0 raises
        ("Interleaved1F1B", 4, 9, True),  # rounds 2, 9 % 2 = 1
        ("Interleaved1F1B", 4, 14, True),  # rounds 3, 14 % 3 = 2
        ("InterleavedZeroBubble", 4, 9, True),
        ("Interleaved1F1B", 4, 10, False),  # rounds 2 of 5
        ("Interleaved1F1B", 4, 6, False),  # 1 round of 6
        ("InterleavedZeroBubble", 8, 12, False),  # 1 round of 12
        # DualPipeV: m < 2 pp stages raises
        ("DualPipeV", 4, 4, True),
        ("DualPipeV", 4, 7, True),
        ("DualPipeV", 4, 8, False),
        ("ZBVZeroBubble", 4, 7, False),  # 2 pp - 1: the layout's own length
        ("ZBVZeroBubble", 4, 9, False),
        ("LoopedBFS", 4, 5, False),
        # below pp: one round of m (max(1, 3 // 4) = 1, 3 % 1 = 0); ZB-V's empty slots
        ("Interleaved1F1B", 4, 3, False),
        ("InterleavedZeroBubble", 4, 2, False),
        ("LoopedBFS", 4, 1, False),
        ("ZBVZeroBubble", 4, 3, False),
    ],
)
def test_torch_refusals(name: str, pp: int, m: int, torch_raises: bool) -> None:
    """What torch's schedule constructors raise on (schedules.py 00722e64, worked by hand in each
    row's comment) planner refuses, naming torch; what they take, fewer micro-batches than
    stages among them, it takes."""
    vpp = 2
    job, lay = _titan_layout(pp, vpp, m, name)
    why = broken(job, lay).get("tt_microbatches")
    assert (why is not None) == torch_raises
    if why is not None:
        assert why.field == "training.global_batch_size" and "torch raises" in why.message


@pytest.mark.parametrize(
    ("name", "m", "torch_raises"),
    [("1F1B", 3, True), ("1F1B", 4, False), ("GPipe", 3, False), ("GPipe", 1, False)],
)
def test_single_stage_schedules_refusals(name: str, m: int, torch_raises: bool) -> None:
    """torch's Schedule1F1B raises where m < pp (its __init__, schedules.py 00722e64: "Number of
    microbatches (3) must be greater than or equal to the number of stages (4)"); ScheduleGPipe
    has no such check and runs any m (its fill-drain bubble is the closed form's at any m)."""
    job, lay = _titan_layout(4, 1, m, name)
    why = broken(job, lay).get("tt_microbatches")
    assert (why is not None) == torch_raises
    if why is not None:
        assert "torch raises" in why.message and f"got {m}" in why.message


@pytest.mark.parametrize(
    ("name", "m"),
    [("Interleaved1F1B", 3), ("LoopedBFS", 3), ("InterleavedZeroBubble", 2), ("ZBVZeroBubble", 6)],
)
def test_unfilled_pipelines_priced_in_torchs_order(name: str, m: int) -> None:
    """torch runs these (one round of m < pp; ZB-V idles in the slots of 2 pp - 1 - m missing
    micro-batches), and they were refused as not modelled: now taken, their bubble the step of
    torch's own order over the plan's stages (`looped_order.looped_step`, `v_schedule.simulate_v`,
    no recompute: W = B / 2) less m times the slowest stage's F + B."""
    job, lay = _titan_layout(4, 2, m, name)
    assert "tt_microbatches" not in broken(job, lay) and lay.recompute == "none"
    perf = cost.estimate(job, lay)
    fwd, bwd = [f for f, _ in perf.stages], [b for _, b in perf.stages]
    wgt = [b / 2 for b in bwd]
    if name == "ZBVZeroBubble":
        step = max(op.end for ops in simulate_v(name, 4, m, fwd, bwd, wgt) for op in ops)
    else:
        step = looped_step(name, 2, m, fwd, bwd, wgt)
    top = max(f + b for f, b in perf.stages)
    assert perf.breakdown.bubble == pytest.approx(step - m * top, rel=1e-9)
    assert memory.estimate(job, lay).peak > 0


def test_dual_pipe_v_check_refuses_what_torch_raises_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reproducer: DualPipeV at pp 4 with 4 micro-batches (global batch 8 over dp 2) used to
    pass `check` (exit 0, Megatron's groups of pp: 4 % 4 = 0); torch raises (4 < 8 stages)."""
    training = f"{TITAN_4K}global_batch_size = 8\n"
    par = "[parallel]\npp = 4\nvpp = 2\nzero_stage = 3\n"
    extra = '[torchtitan]\npipeline_schedule = "DualPipeV"\n'
    path = write(tmp_path, plan_text(training=training, parallel=par) + extra)
    code, _, err = run(["check", str(path)], capsys)
    assert code == 2
    assert "training.global_batch_size" in err and "8; got 4" in err


def test_v_schedules_place_their_stages_without_a_warning(tmp_path: Path) -> None:
    """torchtitan's V schedules put stages r and 2 pp - 1 - r on rank r (e347b1e5
    distributed/pipeline_parallel.py:447-469): rank 0 holds the embedding and the output layer
    and loss. That placement is modelled (`Layout.v_stages`, tests/model/test_v_placement.py),
    so check no longer warns that it is not (the warning tt_v_placement is gone); the
    interleaved schedules place stage k on rank k mod pp, as before."""
    from planner.search.rules import warnings

    job, lay = _plan(tmp_path, 2, "ZBVZeroBubble")
    assert warnings(job, lay) == []
    assert lay.v_stages and lay.output_rank == 0
    job, lay = _plan(tmp_path, 2, "Interleaved1F1B")
    assert warnings(job, lay) == []
    assert not lay.v_stages and lay.output_rank == 3


@pytest.mark.parametrize(
    ("name", "vpp", "refused"),
    [
        ("ZBVZeroBubble", 2, True),
        ("DualPipeV", 2, True),
        ("InterleavedZeroBubble", 2, True),
        ("Interleaved1F1B", 2, False),
        ("1F1B", 1, False),
    ],
)
def test_compiled_stages_refuse_the_split_backward_schedules(
    tmp_path: Path, name: str, vpp: int, refused: bool
) -> None:
    """torch's zero-bubble and DualPipeV classes call `_check_torch_compile_compatibility`
    ("we dont support input/weight backward split with torch.compile", pytorch/pytorch
    torch/distributed/pipelining/schedules.py), and torchtitan b5bcd76c
    experiments/graph_trainer/tests/test_numerics.py:355-357 says "torch.compile is incompatible
    with those eager PP schedules"; the others run compiled blocks."""
    job, lay = _plan(tmp_path, vpp, name)
    assert "tt_schedule" not in broken(job, lay)
    compiled = replace(job, torchtitan=job.titan.model_copy(update={"compile": True}))
    assert ("tt_schedule" in broken(compiled, lay)) == refused
