"""Pipeline schedules: micro-batches, bubbles and the step time of a pipeline.

p = pipeline stages, m = micro-batches per pipeline per step, v = virtual chunks per rank.
m = global_batch / (dp x micro_batch_size) (`Layout.num_microbatches`; Megatron
`num_microbatches_calculator.py`).

Bubble (Narayanan et al. 2021, arXiv:2104.04473; ecosystem.md 3.3): with 1F1B each micro-batch
passes every stage once on the way in (fill) and once on the way out (drain). With per-micro-batch
stage times t_r (forward + backward) the step takes

    T = m * max_r t_r + (sum_r t_r - max_r t_r) / v,

i.e. the slowest stage sets the steady-state pace and the fill/drain is the time the other stages
take, shortened v-fold by the interleaved schedule (each chunk is 1/v of a stage). With equal stages
the bubble is (p-1)/(v*m) of the ideal time m*t: the textbook (p-1)/m for 1F1B and
(p-1)/(v*m) for interleaved 1F1B; as a fraction of the whole step, (p-1)/(v*m + p-1).

`simulate` times Megatron-LM's own op order instead (warm-up, one forward one backward, cool-down;
interleaved chunks in its schedule table), each op when its rank is free and its input is ready:
`explain` draws it. It agrees with the closed form exactly for equal stages and, in 1F1B, whenever
the last stage is the slowest; otherwise 1F1B's closed form is the longer (a slow early stage's
warm-up overlaps the others' fill), and `schedule_bubble` times 1F1B exactly
(`planner.model.one_f_one_b`); an interleaved one, with its exposed hops, lies within -1.5% ..
+11.9% of it on 2,000 random uneven draws (tests/test_schedule.py). benchmarks/pipeline_schedule.py
measures the gap with the model's per-stage times: 0 on the published runs with pp > 1, at most
1.65% of the step on the Hagemann sweep and 0.43% on suggest's top picks, so the search keeps the
closed form (the simulation costs O(p x m x v) per layout).

torchtitan runs torch.distributed.pipelining's schedules (`planner.inputs.torchtitan.Schedule`);
`schedule_bubble` gives each one's closed form, per stage r with F_r its forward, B_r its whole
backward (recompute included) and W_r its weight-gradient part, generalised to uneven stages as
(sum_r g_r - max_r g_r) / d with g and d:

  1F1B, GPipe                    F + B               d = 1   (GPipe runs all forwards first:
                                                              the same fill and drain)
  Interleaved1F1B, LoopedBFS     F + B               d = v   (Narayanan et al.; breadth-first
                                                              looping, Lamy-Poirier 2023)
  InterleavedZeroBubble          F + B - 2W          d = v   (ZB1P: Qi et al., "Zero Bubble
                                                              Pipeline Parallelism", ICLR 2024,
                                                              arXiv:2401.10241, ZB-H1; the
                                                              DualPipe README's ZB1P row)

g is never below 0. W = WGRAD_SHARE of the backward less its recompute: a linear layer's weight
gradient GEMM has the dgrad GEMM's three dimensions (layer_time: backward = 2 x forward), and
the GEMMs dominate.

ZBVZeroBubble and DualPipeV are priced from torch's own order (`planner.model.v_bubble`: the
longest path through each class's actions at the step's m, exact), not from their papers'
formulas: ZB-V's (p-1)(F+B-3W)/2 is 0 at F = I = W, where torch's order idles p - 1 chunk
forwards. Below pp micro-batches (torch runs Interleaved1F1B and InterleavedZeroBubble so in one
round of m, and LoopedBFS) no group fills the pipeline and the closed form underprices the fill:
those steps are timed in torch's own order (`planner.model.looped_order`, exact)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

from planner.model import one_f_one_b
from planner.model.looped_order import looped_step, unfilled
from planner.model.megatron_order import schedule_table, warmup
from planner.model.v_bubble import V_BUBBLES, v_bubble

if TYPE_CHECKING:
    from planner.inputs.layout import Layout
    from planner.inputs.plan import Job

WGRAD_SHARE = 0.5
"""Weight-gradient share of a layer's backward (less recompute): dW and dX GEMMs of a linear layer
have the same M x K x N (Qi et al. 2024 take T_W = T_B for the same reason)."""

BUBBLE_TERMS: dict[str, tuple[float, float, float, int | None]] = {
    "1F1B": (1.0, 1.0, 0.0, 1),
    "GPipe": (1.0, 1.0, 0.0, 1),
    "Interleaved1F1B": (1.0, 1.0, 0.0, None),
    "LoopedBFS": (1.0, 1.0, 0.0, None),
    "InterleavedZeroBubble": (1.0, 1.0, -2.0, None),
}
"""Schedule -> (a, b, w, d): per stage g = a F + b B + w W, bubble (sum g - max g) / d, d None for
vpp (module docstring). The V schedules' bubbles are not of this form (`v_bubble.V_BUBBLES`)."""

BUBBLE_TEXT: dict[str, str] = {
    "1F1B": "(p-1)(F+B)",
    "GPipe": "(p-1)(F+B)",
    "Interleaved1F1B": "(p-1)(F+B)/v",
    "LoopedBFS": "(p-1)(F+B)/v",
    "InterleavedZeroBubble": "(p-1)(F+B-2W)/v",
    "ZBVZeroBubble": "max(max(F,I)+(p-2)W, (p-1)(I+X), (2p-3)F-(p-2)I+(p-1)X+Y)/2 "
    "(I = B-W, X = max(I-2W,0), Y = max(F-I-W,0); uneven stages: the longest path through "
    "torch's order)",
    "DualPipeV": "(max((p-2)F+(p-1)I, 2(p-1)F)+(p-1)max(I-W,0))/2 (I = B-W; uneven stages: the "
    "longest path through torch's order)",
}
"""Each schedule's bubble with equal stages, as `explain` prints it."""


def bubble_text(name: str, pp: int, m: int) -> str:
    """How `explain` says schedule `name`'s bubble at m micro-batches: `BUBBLE_TEXT`'s, or below
    pp for torch's looped schedules the order it is timed in (`looped_order.unfilled`)."""
    if unfilled(name, pp, m):
        return "the longest path through torch's order (m < p: no round fills the pipeline)"
    return BUBBLE_TEXT[name]


def pipeline_time(stage_times: Sequence[float], m: int, vpp: int = 1) -> tuple[float, float]:
    """(steady, bubble) seconds of one step, from each stage's time per micro-batch.

    steady = m * max(t), bubble = (sum(t) - max(t)) / v."""
    slowest = max(stage_times)
    return m * slowest, (sum(stage_times) - slowest) / vpp


def schedule_name(job: Job, lay: Layout) -> str:
    """The pipeline schedule a plan runs: torchtitan's (named or its default), else Megatron's
    1F1B or interleaved 1F1B."""
    if job.framework == "torchtitan":
        return job.titan.schedule(lay.vpp)
    return "1F1B" if lay.vpp == 1 else "Interleaved1F1B"


def weight_grads(bwd: Sequence[float], recompute: Sequence[float]) -> list[float]:
    """Each stage's weight-gradient part W: WGRAD_SHARE of its backward less its recompute."""
    return [WGRAD_SHARE * max(b - r, 0.0) for b, r in zip(bwd, recompute, strict=True)]


def schedule_bubble(
    name: str,
    stages: Sequence[tuple[float, float]],
    recompute: Sequence[float],
    vpp: int = 1,
    m: int | None = None,
) -> float:
    """Bubble seconds of one step of schedule `name` (module docstring), from each stage's
    (forward, backward) seconds per micro-batch and the recompute inside that backward; 1F1B and
    interleaved 1F1B give `pipeline_time`'s bubble. m, the micro-batches, only the V schedules,
    1F1B and torch's looped schedules read (uneven stages' bubble depends on it; None: the V
    schedules' limit, `v_bubble.v_bubble`, 1F1B's closed form; given, 1F1B's exact step,
    `one_f_one_b.step`, less its steady state m max_r t_r, and below pp micro-batches torch's
    Interleaved1F1B, InterleavedZeroBubble and LoopedBFS timed in their own order,
    `looped_order.looped_step`, less the same: no group fills the pipeline there)."""
    weights = weight_grads([b for _, b in stages], recompute)
    if name in V_BUBBLES:
        return v_bubble(name, stages, weights, m)
    if name == "1F1B" and m is not None and len(stages) > 1:  # exact: a slow early stage's
        fwd, bwd = zip(*stages, strict=True)  # warm-up hides fill (one stage: none at all)
        return max(one_f_one_b.step(fwd, bwd, m) - m * max(f + b for f, b in stages), 0.0)
    if m is not None and unfilled(name, len(stages), m):  # torch's order: no closed form
        fwd, bwd = zip(*stages, strict=True)
        top = m * max(f + b for f, b in stages)
        return max(looped_step(name, vpp, m, fwd, bwd, weights) - top, 0.0)
    a, b, w, d = BUBBLE_TERMS[name]
    g = [max(a * f + b * bwd + w * wt, 0.0) for (f, bwd), wt in zip(stages, weights, strict=True)]
    return (sum(g) - max(g)) / (vpp if d is None else d)


def flush_exposed(drain: float, stages: Sequence[tuple[float, float]], vpp: int = 1) -> float:
    """Seconds the last stage's flush work (`drain`: Megatron's deferred output-layer weight
    gradients, `output_time.deferred_wgrad`) adds to the step: it starts when the last stage's
    final backward ends and runs while that micro-batch's gradient crosses the other stages,
    each running one chunk's backward (its per-micro-batch backward / vpp: the schedules'
    cooldown, pipeline_parallel/schedules.py d98e8a64 drains it after the cooldown, before the
    gradients' reduction); what outlasts them shows."""
    window = sum(b for _, b in stages[:-1]) / vpp
    return max(drain - window, 0.0)


Chunks = tuple[range, ...]
"""A pipeline rank's decoder layers: one range of layer indices per virtual chunk
(`Layout.chunk_layers`)."""


def layer_count(chunks: Chunks) -> int:
    """Decoder layers in a rank's chunks."""
    return sum(map(len, chunks))


class Op(NamedTuple):
    """One forward or backward of one micro-batch through one model chunk, on one rank."""

    start: float
    end: float
    kind: str
    """"F" forward, "B" backward."""
    micro: int
    chunk: int
    """The rank's model chunk (0 .. vpp - 1; always 0 without interleaving)."""


@lru_cache(maxsize=1 << 16)
def unmerged_share(pp: int, vpp: int, rank: int, m: int, group: int | None = None) -> float:
    """Share of a rank's forwards (and of its backwards) that Megatron's EP all-to-all overlap
    (--overlap-moe-expert-parallel-comm) cannot pair with another micro-batch's backward (or
    forward). That schedule runs each steady-state forward and backward as one merged op: the
    warm-up forwards and cool-down backwards run alone, and where there is no warm-up (pp = 1)
    the first forward and the last backward do, since a micro-batch's backward cannot merge with
    its own forward. With pipelines (interleaved: the overlap needs vpp there) the warm-up runs
    one forward more, so that every merged pair's forward and backward are independent
    (get_pp_rank_microbatches, Megatron-LM d98e8a64 schedules.py:966-970), and one more backward
    runs alone after. `group`: the layout's micro-batches per virtual-stage group (None: pp).
    Remembered (a function of its integers alone; the search's EP-overlap bounds and estimates
    ask it of every rank of every layout they time)."""
    total = m * vpp
    return min(1.0, warmup(pp, vpp, rank, total, group, ep_overlap=True) / total)


def op_order(
    pp: int, m: int, vpp: int, rank: int, group: int | None = None, ep_overlap: bool = False
) -> list[tuple[str, int, int]]:
    """Megatron-LM's order of (kind, micro-batch, chunk) on one pipeline rank.

    Forwards walk the schedule table (`megatron/core/pipeline_parallel/schedules.py`,
    `get_schedule_table`, in groups of `group` micro-batches, --microbatch-group-size-per-
    virtual-pipeline-stage, default pp): for each group, chunk 0 for all of its micro-batches,
    then chunk 1, ..., the last group taking every micro-batch left; the k-th backward takes the
    k-th entry with the chunk mirrored (vpp - 1 - c). The rank runs its warm-up forwards
    (`get_pp_rank_microbatches`: pp - rank - 1 without interleaving, (pp - rank - 1) x 2 +
    (vpp - 1) x group with it, at most all of them; one more under the EP overlap: `warmup`),
    then one forward and one backward at a time, then its remaining backwards."""
    table = schedule_table(m, vpp, group or pp)
    total = m * vpp
    warm = warmup(pp, vpp, rank, total, group, ep_overlap)
    ops = [("F", *table[k]) for k in range(warm)]
    for k in range(total - warm):
        ops.append(("F", *table[warm + k]))
        ops.append(("B", table[k][0], vpp - 1 - table[k][1]))
    ops += [("B", table[k][0], vpp - 1 - table[k][1]) for k in range(total - warm, total)]
    return ops


def _dependency(op: tuple[str, int, int], rank: int, pp: int, vpp: int) -> tuple | None:
    """The op (kind, rank, micro, chunk) that must finish before `op` can start on `rank`.

    A forward takes its input from the previous rank, or (rank 0, chunk c > 0) from the last
    rank's chunk c - 1; a backward takes its gradient from the next rank, or (last rank, chunk
    c < vpp - 1) from rank 0's chunk c + 1; the last chunk's backward follows its own forward."""
    kind, i, c = op
    if kind == "F":
        if rank > 0:
            return ("F", rank - 1, i, c)
        return ("F", pp - 1, i, c - 1) if c > 0 else None
    if rank < pp - 1:
        return ("B", rank + 1, i, c)
    return ("B", 0, i, c + 1) if c < vpp - 1 else ("F", rank, i, c)


def simulate(
    pp: int,
    m: int,
    fwd: float | Sequence[float] = 1,
    bwd: float | Sequence[float] = 2,
    vpp: int = 1,
    p2p: float = 0.0,
    group: int | None = None,
    ep_overlap: bool = False,
) -> list[list[Op]]:
    """One step's pipeline schedule, every op timed, per rank: 1F1B (vpp 1) or Megatron's
    interleaved 1F1B (vpp > 1) in groups of `group` micro-batches per virtual stage (default pp),
    which needs pp <= group <= m and the last group whole or of pp at least
    (`rules.interleaved_microbatches`), or below pp one group of all m (torch's
    Interleaved1F1B in its one round, `looped_order.rank_order`: the same order).

    fwd and bwd are one micro-batch's forward and backward through the whole rank, the same on
    every rank or one per rank (uneven stages); each of its vpp chunks takes 1/vpp of them. An op
    starts when its rank is free and the op it depends on has finished, plus `p2p` seconds when
    that op ran on another rank: a send overlapped with compute, the rank staying free (Megatron's
    overlap_p2p_comm, on with interleaving). 1F1B's blocking sends are in the stage times.
    `ep_overlap`: Megatron's EP all-to-all overlap, one more warm-up forward (`warmup`); each
    merged forward and backward is drawn as the two ops it merges, one after the other."""
    f_of = [float(fwd)] * pp if isinstance(fwd, int | float) else [float(t) for t in fwd]
    b_of = [float(bwd)] * pp if isinstance(bwd, int | float) else [float(t) for t in bwd]
    if len(f_of) != pp or len(b_of) != pp:
        raise ValueError(f"one forward and one backward time per rank: {pp} ranks")
    g = group or pp
    if vpp > 1 and not (min(pp, m) <= g <= m and (m % g == 0 or m % g >= pp)):
        raise ValueError(
            f"the interleaved schedule needs pp ({pp}) <= the group ({g}) <= m ({m}), or one "
            "group of all m, and the last group whole or of pp micro-batches at least"
        )
    order = [op_order(pp, m, vpp, r, group, ep_overlap) for r in range(pp)]
    done: dict[tuple, float] = {}
    clock = [0.0] * pp
    pos = [0] * pp
    out: list[list[Op]] = [[] for _ in range(pp)]
    while any(pos[r] < len(order[r]) for r in range(pp)):
        progressed = False
        for r in range(pp):
            # run this rank's ops for as long as their inputs are ready
            while pos[r] < len(order[r]):
                kind, i, c = order[r][pos[r]]
                dep = _dependency((kind, i, c), r, pp, vpp)
                if dep is not None and dep not in done:
                    break
                ready = 0.0 if dep is None else done[dep] + (p2p if dep[1] != r else 0.0)
                start = max(clock[r], ready)
                end = start + (f_of[r] if kind == "F" else b_of[r]) / vpp
                out[r].append(Op(start, end, kind, i, c))
                done[(kind, r, i, c)] = end
                clock[r] = end
                pos[r] += 1
                progressed = True
        if not progressed:  # pragma: no cover - Megatron's schedules are deadlock-free
            raise RuntimeError("pipeline simulation made no progress")
    return out


def interleaved_p2p_exposed(
    vpp: int,
    m: int,
    hop: float,
    fwd: Sequence[float],
    bwd: Sequence[float],
    group: int | None = None,
    waits: int = 0,
) -> float:
    """Seconds of point-to-point traffic one step of the interleaved schedule exposes, its sends
    overlapped with compute: `hop` one activation (or gradient) message, fwd and bwd one
    micro-batch's forward and backward through each rank (as `simulate` takes them), `group`
    the micro-batch group g (--microbatch-group-size-per-virtual-pipeline-stage, default pp).

    Narayanan et al. 2021 (section 2.2.2): interleaving multiplies the sends v-fold. On the fill,
    the first micro-batch's activations reach the last rank after pp - 1 hops, and each of the
    vpp - 1 times they wrap round to rank 0 for the next chunk they make pp more hops, while the
    slowest rank s is busy with the other n - 1 micro-batches of its chunk's group: a wrap
    exposes pp x hop less that slack, (n - 1) t_s - sum of the other ranks' t, over vpp, with
    n = g on the fill (the first group; Megatron-LM d98e8a64 schedules.py:989-1003 runs each
    chunk's g micro-batches before the next chunk's) and n = the last group's m mod g (g where
    g divides m) on the drain, whose backwards mirror the table (schedules.py:1248). With equal
    stages and g = pp that is 2 (pp vpp - 1) hops, against 2 (pp - 1) without interleaving; a
    larger g hides g - pp more chunk forwards (backwards) of each wrap. In the steady state a hop
    hides behind the chunk forward that runs meanwhile; a longer one adds its excess once per
    (micro-batch, chunk).
    Checked against `simulate(..., p2p=hop, group=g)`: exact for equal stages while a hop is
    shorter than a chunk's forward, an upper bound beyond; with uneven stages see
    tests/model/test_schedule.py and tests/model/test_p2p_group.py.

    `waits`: the forward sends a micro-batch the slowest rank waits on before its next op
    (Megatron frees each steady-state forward output only once its isend has completed:
    pipeline_parallel/schedules.py:1811-1815 in `pp_post_forward`, deallocate_pipeline_outputs
    being set, training/argument_utils.py:305; the warm-up's exchanges block by default,
    :1633-1660; the wait makes the compute stream wait for the NCCL send, which completes once
    the peer's receive has taken it, NCCL's ncclSend "blocking for the GPU"): each holds that
    rank one hop. Those of about pp
    micro-batches fall where the rank waits on the fill's and drain's hops anyway: (m - pp) x
    waits hops more. Checked against an event simulation that holds the sender
    (tests/model/test_send_waits.py): exact for equal stages (the last rank's vpp - 1 sends)
    while a hop is at most 5% of a chunk's forward; below it by up to 4% of the step, above it
    by up to 2%, for uneven stages and a hop up to a fifth of a chunk's forward (rank 0, sending
    every chunk, waits more as hops grow)."""
    pp = len(fwd)
    g = group or pp
    s = max(range(pp), key=lambda r: fwd[r] + bwd[r])
    steady = m * vpp * max(0.0, hop - min(fwd) / vpp) + max(m - pp, 0) * waits * hop
    out = 2 * (pp - 1) * hop + steady
    for t, n in ((fwd, g), (bwd, m % g or g)):
        slack = ((n - 1) * t[s] - (sum(t) - t[s])) / vpp
        out += (vpp - 1) * max(0.0, pp * hop - slack)
    return out


def shown_microbatches(m: int, pp: int, vpp: int, at_most: int, group: int | None = None) -> int:
    """How many micro-batches a drawing of the schedule shows: at most `at_most` of the m, and
    for the interleaved schedule whole groups (of `group`, default pp; at least one)."""
    if vpp == 1:
        return min(m, at_most)
    g = group or pp
    return min(m, max(g, at_most // g * g))


def timeline_text(
    pp: int,
    m: int,
    width: int = 100,
    fwd: float | Sequence[float] = 1,
    bwd: float | Sequence[float] = 2,
    vpp: int = 1,
    p2p: float = 0.0,
    group: int | None = None,
    ep_overlap: bool = False,
) -> list[str]:
    """One text line per pipeline rank: F forward, B backward (f and b for the odd chunks of an
    interleaved schedule), . idle (the bubble), at most `width` characters of equal time, each op
    at least one, its edges rounded to the nearest (`simulate`'s durations)."""
    sched = simulate(pp, m, fwd, bwd, vpp, p2p, group, ep_overlap)
    end = max(op.end for rank in sched for op in rank)
    cell = end / width if end > width or not float(end).is_integer() else 1.0
    cols = math.ceil(end / cell - 1e-9)
    lines = []
    for r, ops in enumerate(sched):
        row = ["."] * cols
        for op in ops:
            mark = op.kind if op.chunk % 2 == 0 else op.kind.lower()
            # rounded edges: back-to-back ops tile without a gap
            first = min(round(op.start / cell), cols - 1)
            for t in range(first, min(max(first + 1, round(op.end / cell)), cols)):
                row[t] = mark
        lines.append(f"rank {r:>2} " + "".join(row))
    return lines
