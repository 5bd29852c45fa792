"""Activation micro-batches a pipeline rank holds at its peak, per model chunk, in each schedule
(`planner.model.stage_activations` multiplies them by what each chunk keeps).

In flight (NVIDIA/Megatron-LM d98e8a64 megatron/core/pipeline_parallel/schedules.py
`get_pp_rank_microbatches`, `get_schedule_table`): rank r runs its warm-up forwards (1F1B:
pp - r - 1; interleaved: 2(pp - r - 1) + (vpp - 1) x group, group =
microbatch_group_size_per_vp_stage, default pp), then one forward and one backward at a time.
Which chunk each forward ran through follows the schedule table (groups of `group` micro-batches,
chunk by chunk), so with uneven chunks (a pipeline layout, the embedding or loss counted as a
layer) each chunk's activations count as often as it is in flight (`schedule_peak`); with even
chunks on rank 0 this is Korthikanti's 1 + (pp - 1)/(pp x vpp).

torchtitan's other schedules (torch.distributed.pipelining, `schedule_peak`'s `name`): GPipe and
LoopedBFS run every forward of the step before the first backward (all m x vpp chunk micro-batches
in flight). The split-backward schedules (InterleavedZeroBubble, ZBVZeroBubble, DualPipeV) keep a
chunk micro-batch's activations from its forward until its backward's weight-gradient part W
(pytorch/pytorch 00722e64 torch/distributed/pipelining stage.py
`backward_one_chunk(full_backward=False)` keeps the stage's input values, output and
param_groups, the autograd graph's split nodes, in `backward_state` until
`backward_weight_one_chunk`; _backward.py `stage_backward_input` runs with retain_graph=True, so
every node below those split nodes keeps its saved tensors; the first stage does nothing at I and
its whole backward at W), or until its whole backward: not ZB-H1's accounting, where a deferred W
keeps only its GEMMs' inputs (Qi et al. 2024).

InterleavedZeroBubble (`DEFERRED_W`), in torch's order (`planner.model.looped_order`): rank r
runs w = (v - 1) g + pp - 1 - r warm-up forwards (g torch's micro-batches per round), then a
forward and an I a step, each I from the rank's r-th on followed by the oldest owed W, so the
forward of step r holds w + r + 1 = (v - 1) g + pp chunk micro-batches on every rank (at most
m v), and each later step adds one forward and frees one W: interleaved 1F1B's walk with
(v - 1) g + pp - 1 forwards held before it, where Megatron's holds (v - 1) g + 2 (pp - 1 - r)
(`in_flight`; tests/model/test_zb_in_flight.py walks torch's order).

ZBVZeroBubble and DualPipeV place stages r and 2p - 1 - r on rank r (a V: chunk 0 of rank r is
stage r, chunk 1 stage 2p - 1 - r, the loss on rank 0: `Layout.v_stages`, `Layout.output_rank`)
and hold what torch's own order of each (`planner.model.v_schedule.rank_order`, pytorch/pytorch
00722e64 schedules.py) holds at its peak, `v_in_flight`, freeing at W as above. Freed at the
input-gradient part I instead the peaks are the same: no forward runs between an I and its W but
in the cool-down, after the peak (tests/model/test_v_in_flight.py walks both). ZB-V's warm-up
ends with 2p - 1 - r chunk-0 and r + 1 chunk-1 micro-batches in flight, and each steady round's
chunk-0 forward, before the I that follows it, briefly holds 2p - r and r; DualPipeV holds
2p - r and r + 1 (its overlapped forward counted before the backward it runs with); each count at
most m (ZB-V leaves the slots past m empty), so that below 2 pp - 1 micro-batches a middle rank
can hold the most. Each I of the three split-backward schedules (`SPLIT_BACKWARD`)
also keeps a pending W's stash until its W (`planner.model.pending_w`): with it the V's peak is
its order walked (`v_schedule.held_peak`; DualPipeV's overlapped backwards run whole, its Is
are its steps 3, 7 and the second half of 6), and which rank holds the most is no longer one
end of a linear piece in the rank: memory asks every rank of a V (`memory._peak_candidates`).
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.model.early_receives import early_counts, held_counts
from planner.model.looped_order import deferred_peak
from planner.model.megatron_order import table_chunks, warmup
from planner.model.v_schedule import held_peak


def group_size(layout: Layout, group: int | None = None) -> int:
    """Micro-batches the interleaved schedule runs per chunk in a row: `group` where given
    (`torch_schedules.microbatch_group`), else the layout's (default pp)."""
    return group or layout.microbatch_group_size_per_vp_stage or layout.pp


DEFERRED_W = "InterleavedZeroBubble"
"""torch's looped schedule that frees a chunk micro-batch's activations at its deferred W
(module docstring)."""


def in_flight(
    layout: Layout,
    rank: int,
    num_microbatches: int,
    group: int | None = None,
    name: str = "1F1B",
) -> int:
    """Micro-batch chunks whose activations rank `rank` holds at its peak (1F1B / interleaved):
    its warm-up forwards and the steady state's next one. With the EP all-to-all overlap Megatron
    runs one more warm-up forward (schedules.py:964-970) and then each forward merged with an
    earlier micro-batch's backward, layer by layer, so that the one being built and the one being
    released together hold one micro-batch's activations and one layer more
    (`stage_activations`): the same count. Under `DEFERRED_W` (`name`) (v - 1) g + pp on every
    rank (module docstring)."""
    total = num_microbatches * layout.vpp
    size = group_size(layout, group)
    if name == DEFERRED_W:
        return min((layout.vpp - 1) * size + layout.pp, total)
    warm = warmup(layout.pp, layout.vpp, rank, total, size)
    return min(warm + 1, total)


V_SCHEDULES = ("ZBVZeroBubble", "DualPipeV")
ALL_FORWARDS_FIRST = ("GPipe", "LoopedBFS")
SPLIT_BACKWARD = (DEFERRED_W, *V_SCHEDULES)
"""torch's schedules whose I keeps a pending W's stash until its W (`planner.model.pending_w`)."""


def v_in_flight(name: str, pp: int, rank: int, m: int) -> tuple[tuple[int, int], ...]:
    """(chunk 0's, chunk 1's) micro-batches in flight on rank `rank` of V schedule `name` at
    each moment of its order that can hold its peak (module docstring): the peak is the largest
    of count 0 x kept[0] + count 1 x kept[1] over them (any other moment holds no more of
    either chunk than one of these)."""
    if name == "DualPipeV":
        return ((min(2 * pp - rank, m), min(rank + 1, m)),)
    warm = (min(2 * pp - 1 - rank, m), min(rank + 1, m))  # the warm-up's last chunk-1 forward
    if 2 * pp - rank > m:  # no steady chunk-0 forward beyond the warm-up's
        return (warm,)
    return warm, (2 * pp - rank, rank)  # a steady chunk-0 forward before its round's I


def schedule_peak(
    kept: tuple[float, ...],
    layout: Layout,
    rank: int,
    m: int,
    name: str = "1F1B",
    group: int | None = None,
    message: float = 0.0,
    held_messages: bool = False,
    pending: tuple[float, ...] = (),
) -> float:
    """The most activation bytes rank `rank` holds at once, chunk c keeping kept[c] per
    micro-batch: its warm-up forwards, then one forward and one backward at a time (Megatron's
    order, `planner.model.schedule.op_order`, with its micro-batch group), each forward adding its
    chunk's bytes and each backward releasing the mirrored chunk's. The pattern repeats every
    group x vpp steps, so one period after the warm-up holds the peak when the groups are whole;
    a shorter last group (m not a multiple of the group) breaks the period, and the whole steady
    state is walked. torchtitan's schedule `name` where it differs (module docstring); `group`
    the schedule's micro-batch group where not the layout's (`torch_schedules.microbatch_group`:
    torch's rounds). `message`: the bytes of one pipeline message, where Megatron's interleaved
    schedule holds those `early_receives.early_counts` counts (rank 0's and the last rank's
    with a group above pp: every op of the step is walked, each moment holding its early
    receives too); `held_messages`: and after each steady forward those
    `early_receives.held_counts` counts (the output being sent, the received input and gradient
    the next ops take, the last input gradient), in 1F1B too; with the layout's p2p overlap
    (`Layout.overlap_p2p_comm`) and EP overlap as `early_receives` says; none under torch's
    `DEFERRED_W`, whose order is not Megatron's (torchtitan's messages: `fsdp2`), which with
    `pending` (each chunk's bytes a pending W keeps, `planner.model.pending_w`) walks torch's
    order (`looped_order.deferred_peak`); the V schedules with `pending` walk theirs too
    (`v_schedule.held_peak`)."""
    vpp = len(kept)
    if name == DEFERRED_W:
        if any(pending):
            return deferred_peak(layout.pp, max(m, 1), rank, kept, pending)
        message = 0.0
    if name in ALL_FORWARDS_FIRST:
        return max(m, 1) * sum(kept)
    if name in V_SCHEDULES and vpp == 2:
        if any(pending):
            return held_peak(name, layout.pp, max(m, 1), rank, kept, pending)
        return max(
            c0 * kept[0] + c1 * kept[1] for c0, c1 in v_in_flight(name, layout.pp, rank, max(m, 1))
        )
    n_flight = in_flight(layout, rank, max(m, 1), group, name)
    pp, size = layout.pp, group_size(layout, group)
    overlap = layout.overlap_p2p_comm or vpp == 1  # (Megatron's; read with interleaving alone)
    extra = (
        held_counts(pp, vpp, rank, max(m, 1), size, overlap, layout.ep_comm_overlap)
        if held_messages and message and pp > 1
        else ()
    )
    if vpp == 1:
        return n_flight * kept[0] + message * max(extra, default=0)
    total, group = m * vpp, size
    warm = n_flight - 1 if n_flight < total else total
    if extra:  # Megatron's own warm-up (one steady forward where n_flight is the whole step)
        warm = total - len(extra)
    if message and rank in (0, pp - 1):
        # rank 0's receives after the backward without the p2p overlap (`early_receives`)
        blocking = rank == 0 and not (overlap or layout.ep_comm_overlap)
        early = early_counts(pp, vpp, max(m, 1), group, warm if blocking else None)
        if any(early):
            return _with_early(kept, max(m, 1), group, warm, early, message, rank == 0, extra)
    steady = total - warm if m % group else min(total - warm, group * vpp + 1)
    order = table_chunks(m, vpp, group)  # each forward's chunk, in Megatron's table order
    held = sum(kept[c] for c in order[:warm])
    peak = held
    for j in range(steady):
        held += kept[order[warm + j]]
        now = held + message * extra[j] if extra else held
        if now > peak:  # max(peak, now), as max takes it (the first of equals), inline
            peak = now
        held -= kept[vpp - 1 - order[j]]
    return peak


def one_period(
    vpp: int, layout: Layout, rank: int, m: int, name: str, group: int | None, message: float
) -> bool:
    """Whether `schedule_peak` of `vpp` chunks (`len(kept)`) at m micro-batches is the same at
    every m for which this holds (the other arguments alike), with held messages or without:
    the interleaved walk (neither all forwards first nor a V), the groups whole (m a
    multiple of g, the group), no early receive walked (rank 0's and the last rank's, at g > pp:
    `early_counts` is all 0 at g <= pp, as a receive's consumer comes g entries after the
    entry it was posted for, pp - 1 before its posting), and the steady state longer than one
    period: m vpp - w >= g vpp + 2, w the warm-up, 2 (pp - rank - 1) + (vpp - 1) g
    (`DEFERRED_W`: the forwards held before its walk's first step, (vpp - 1) g + pp - 1). Then the
    warm-up is w, one period (g vpp + 1 steps) is walked, and what it reads is the table's
    first w + g vpp + 1 entries, the same for every m of whole groups, and the first g vpp + 1
    of `held_counts`, whose entry k reads the table's first w + k + 2 entries and whether
    k < m vpp - w - 1 (true for every one of them)."""
    if vpp < 2 or vpp != layout.vpp or name in ALL_FORWARDS_FIRST or name in V_SCHEDULES:
        return False
    pp, g = layout.pp, group_size(layout, group)
    if m % g or (message and rank in (0, pp - 1) and g > pp):
        return False
    warm = pp - 1 if name == DEFERRED_W else 2 * (pp - rank - 1)
    return m * vpp - (warm + (vpp - 1) * g) >= g * vpp + 2


def _with_early(
    kept: tuple[float, ...],
    m: int,
    group: int,
    warm: int,
    early: tuple[int, ...],
    message: float,
    first: bool,
    extra: tuple[int, ...] = (),
) -> float:
    """`schedule_peak` walking every op (the warm-up forwards, one forward and one backward at
    a time, the cool-down backwards), after each one the activations held plus `message` per
    early receive: `early` indexed by the forwards done on the first rank (`first`), by the
    backwards done on the last; after the steady forward k also `extra[k]` messages."""
    vpp = len(kept)
    order = table_chunks(m, vpp, group)
    total = len(order)
    ops = "F" * warm + "FB" * (total - warm) + "B" * warm
    held = peak = 0.0
    fwd = bwd = 0  # ops of each kind done
    for op in ops:
        now = 0
        if op == "F":
            held += kept[order[fwd]]
            fwd += 1
            if fwd > warm and extra:  # the steady forward fwd - warm - 1
                now = extra[fwd - warm - 1]
        else:
            held -= kept[vpp - 1 - order[bwd]]
            bwd += 1
        peak = max(peak, held + message * (early[fwd if first else bwd] + now))
    return peak
