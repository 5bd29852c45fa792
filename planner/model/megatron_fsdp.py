"""Megatron-FSDP's unsharded buffers on one GPU of a pipeline rank (ZeRO 2 optim_grads, ZeRO 3
optim_grads_params), as Megatron-LM d98e8a64 runs them; paths under megatron/core/distributed/
fsdp/src/megatron_fsdp/ (pgb: param_and_grad_buffer.py).

- Units: every decoder layer (the MTP layers' inner layers too) is an FSDP unit
  (mcore_fsdp_adapter.py:163-171), its dense parameters one bucket group and, in an MoE layer,
  its experts' a second with the next ids (pgb:1789-1825, grouped per unit and expert flag
  :1928-1958). Each model chunk is its own Megatron-FSDP instance (its own queue and window).
- The unit size C (megatron_fsdp.py:420-444): --suggested-communication-unit-size where set;
  else at ZeRO 3 twice the chunk's average unit (floor), at ZeRO 2 the DDP bucket size, each at
  least `UNIT_FLOOR`. The gradient queue's capacity is C, the all-gather prefetch P = C // 2.
- Bytes: each bucket group's by `megatron_fsdp_bytes` (none for a group whose sharding group has
  one rank, the gradient communication dtype, FP8 parameters at 1 B); elements decide the queue
  and the prefetch.
- Gradients: a unit's unsharded gradient bucket is allocated when first written (pgb:3094-3117),
  in the communication dtype (`Job.grad_comm_bytes`), and freed only when popped from the
  reduce-scatter queue (pgb:4230-4250): before a group is dispatched the queue pops its oldest
  entries while their sum exceeds C (pgb:3935-3948), then takes the group (:4254); the experts'
  group is ready first in a layer's backward. The queue empties at the chunk's post-backward
  (megatron_fsdp.py:901, pgb:3860). Outside units the embedding, final norm, MTP projections
  and output layer share one parameter group split by the DDP bucket size (pgb:1855-1866;
  none without --overlap-grad-reduce, as Megatron-LM resolves it then, training.py:2192-2193):
  the output side's bucket is reduced first in the backward, the embedding's last, and one
  shared bucket is held from the first gradient to the last.
- Parameters (ZeRO 3): a unit's gather adds the next bucket groups (forward order in the
  forward, backward order in the backward) while the prefetched sum is below P (pgb:4487-4510);
  the unit just run was released (megatron_fsdp.py:998 after its forward, :699-700 after its
  backward). Parameters outside units stay gathered all step (no release hook,
  megatron_fsdp.py:1093-1113; the root pre-backward marks only units releasable, :969-974;
  reset keeps them, pgb:4339-4386): `transient_and_resident`'s resident bytes (the rank's FP8
  cache slot in `rank_states`, counted at the step as well). Bucket sizes: `padded`.
- Double buffering (`Layout.fsdp_double_buffer`): a pool of two units' buffers for the
  parameters and two for the gradients (pgb:2524-2576), kept once allocated; the queue keeps
  at most two units with the incoming one (pgb:3956-3978) and the prefetch stops at two
  (pgb:4420-4432, :4475-4485). The fixed pool's units are the most numerous group of one shape;
  the others, and the buckets outside units, use the backup allocator (`megatron_fsdp_pool`):
  beside the pool two of the largest other units and one bucket outside units (the output
  side's or the embedding's; `held`). The max pool (`Layout.fsdp_max_pool`) takes every unit,
  its buffers sized per dtype and offset to the largest of any chunk's units (`max_pools`).

Coupling with the activations: `profile_and_resident` gives the buffers at each moment of a
micro-batch's forward and backward through a chunk, with how many of its layers hold that
micro-batch's activations then; `fsdp_coupling` subtracts what the chunk has freed by then,
and `memory.stage_memory` adds the largest remainder to the activations' peak. The largest
moment alone bounds it, above by up to floor(C / u) + 1 layers' kept activations for units of
u elements (the activations peak as the backward starts, the queue fills over its first
layers); it stays where the held activations do not follow the layers (full recompute,
fine-grained offloading, CUDA graphs, the EP overlap: `fsdp_coupling`). At the optimizer step
the queue is empty and the units released: beside the step's copies (`StageMemory.grad_copy`)
only what the step's end gathers for the next forward and the double buffer's pool
(`step_bytes`)."""

from __future__ import annotations

from collections.abc import Sequence

from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import params
from planner.model.dp_buckets import default_bucket
from planner.model.fp32 import weight_bytes
from planner.model.megatron_fsdp_bytes import (
    ELEMENTS,
    Pair,
    Price,
    Unit,
    chunk_prices,
    grad_prices,
    sharded,
)
from planner.model.megatron_fsdp_pool import (
    apart,
    cost,
    fixed_pools,
    max_pools,
    pool,
    running,
    shape,
)
from planner.model.schedule import Chunks
from planner.model.stage_params import edge_params

UNIT_FLOOR = 1_000_000_000
"""Megatron-FSDP's smallest default unit size in elements (megatron_fsdp.py:438-441, "Cap to 1B
elements", a max); a unit size given on the command line is taken as it is."""


def chunk_units(job: Job, layout: Layout, rank: int, chunks: Chunks) -> list[list[Unit]]:
    """Each model chunk's units on one GPU of rank `rank`, in forward order: its decoder layers
    (TP-split but for what every TP rank holds whole, the experts over ep x etp), and on the MTP
    rank's last chunk each MTP depth's inner layers."""
    arch = job.arch
    split = layout.ep * layout.expert_tp

    def unit(kind: LayerKind) -> Unit:
        d, e = params.kind_params(arch, kind)
        w = params.replicated_params(arch, kind)
        return (d - w) / layout.tp + w, e / split

    out = [[unit(arch.layer_kinds[i]) for i in chunk] for chunk in chunks]
    if rank == layout.mtp_rank(arch.num_layers, arch.mtp_num_layers) and out:
        depths = 1 if arch.mtp_use_repeated_layer else arch.mtp_num_layers
        out[-1] += [unit(k) for _ in range(depths) for k in arch.mtp_kinds]
    return out


def padded(size: float, group: int, hidden: int) -> float:
    """A bucket of `size` elements as Megatron-FSDP allocates it: padded to a multiple of the
    sharding group's ranks x its chunk-size factor (pgb:254-256, :285-288, :368-373). The factor
    is a common multiple of its weights' inner dimensions (pgb:1876-1919), the hidden size among
    them, so padding to `group` x `hidden` is at most the real padding: what a bucket a little
    over its raw count does to the queue (raw sizes tie C = 2 x the average unit exactly)."""
    granule = max(group, 1) * hidden
    return -(-size // granule) * granule if size else 0.0


def unit_size(job: Job, layout: Layout, units: list[Unit], chunk_params: float) -> float:
    """C, in elements, of a model chunk with `units` (`chunk_params` parameters in all)."""
    if layout.suggested_communication_unit_size is not None:
        return float(layout.suggested_communication_unit_size)
    if layout.zero_stage == 3:
        size = 2 * (sum(d + e for d, e in units) // max(len(units), 1))
    else:
        size = bucket_size(layout, chunk_params) or UNIT_FLOOR
    return float(max(UNIT_FLOOR, size))


def bucket_size(layout: Layout, chunk_params: float) -> float | None:
    """Megatron-FSDP's bucket size (DistributedDataParallelConfig.bucket_size) for a model chunk
    of `chunk_params` parameters: --ddp-bucket-size, the chunk // --ddp-num-buckets, else
    Megatron-LM's default (`dp_buckets.default_bucket`, over the dense data-parallel ranks); None
    without --overlap-grad-reduce (training.py:2192-2193)."""
    if not layout.overlap_grad_reduce:
        return None
    if layout.ddp_bucket_size is not None:
        return float(layout.ddp_bucket_size)
    if layout.ddp_num_buckets is not None:
        return float(chunk_params // layout.ddp_num_buckets)
    return float(default_bucket(layout.dense_dp))


Priced = tuple[float, float]
"""A bucket group's (elements, bytes): its elements count toward the queue's capacity and the
prefetch (bucket_index.size, pgb:3935-3948, :4487-4510), its bytes are what it allocates
(`megatron_fsdp_bytes`)."""


def window(groups: list[Priced], prefetch: float) -> float:
    """Bytes of the bucket groups a gather adds after its unit: the next ones while their
    elements' sum is below `prefetch` (pgb:4487-4510)."""
    size = held = 0.0
    for g, b in groups:
        if size >= prefetch:
            break
        size += g
        held += b
    return held


def _priced(unit: Unit, price: Pair) -> tuple[Priced, Priced]:
    """A unit's (dense, experts') groups as (elements, bytes) at `price`."""
    (d, e), (pd, pe) = unit, price
    return (d, d * pd), (e, e * pe)


def unit_windows(
    units: list[Unit], prefetch: float, prices: Sequence[Price] | None = None
) -> tuple[list[float], list[float]]:
    """Unit parameters gathered at each unit's forward (its window the next groups, dense
    before expert) and at its backward (the groups below it, expert before dense, and what its
    own backward adds, `Price.running`): bytes at `prices` (one per unit), elements without."""
    p = prices if prices is not None else [ELEMENTS] * len(units)
    fwd_groups = [g for u, pr in zip(units, p, strict=True) for g in _priced(u, pr.fwd) if g[0]]
    bwd_groups = [
        g
        for u, pr in zip(units[::-1], p[::-1], strict=True)
        for g in _priced(u, pr.bwd)[::-1]
        if g[0]
    ]
    fwd, done = [], 0
    for u, pr in zip(units, p, strict=True):
        done += (u[0] > 0) + (u[1] > 0)
        own = sum(b for _, b in _priced(u, pr.fwd))
        fwd.append(own + window(fwd_groups[done:], prefetch))
    back, done = [0.0] * len(units), 0
    for i in range(len(units) - 1, -1, -1):
        u, pr = units[i], p[i]
        done += (u[0] > 0) + (u[1] > 0)
        own = sum(b for _, b in (*_priced(u, pr.bwd), *_priced(u, pr.running)))
        back[i] = own + window(bwd_groups[done:], prefetch)
    return fwd, back


Step = tuple[int | None, tuple[Priced, ...]]
"""One backward step: its unit's index (None: buckets outside units) and its groups (`Priced`)
in the order they are dispatched."""


def queue_alive(steps: list[Step], capacity: float) -> list[float]:
    """Gradient bytes alive at each step of a backward without double buffering: the queue and
    the step's own buckets (allocated when first written); then each of the step's groups is
    dispatched after the queue pops its oldest entries while their elements' sum exceeds
    `capacity`."""
    queue: list[Priced] = []
    alive = []
    for _, groups in steps:
        alive.append(sum(b for _, b in queue) + sum(b for _, b in groups))
        for g in groups:
            while queue and sum(q for q, _ in queue) > capacity:
                queue.pop(0)
            queue.append(g)
    return alive


def backward_steps(
    units: list[Unit],
    first: float,
    last: float,
    prices: Sequence[Price] | None = None,
    edge: float = 1.0,
) -> list[Step]:
    """A chunk's gradient steps in backward order: the output side's bucket (`last`: output layer,
    final norm, MTP projections, where the chunk has them), the units from the last (experts'
    group first), the embedding's bucket (`first`); at `prices` (one per unit; elements
    without) and `edge` bytes an element outside units."""
    p = prices if prices is not None else [ELEMENTS] * len(units)
    steps: list[Step] = [(None, ((last, last * edge),))] if last else []
    for i in range(len(units) - 1, -1, -1):
        dense, expert = _priced(units[i], p[i].grad)
        steps.append((i, tuple(g for g in (expert, dense) if g[0])))
    return steps + ([(None, ((first, first * edge),))] if first else [])


def _edges(job: Job, layout: Layout, rank: int, units: list[list[Unit]]) -> tuple[float, float]:
    """(embedding side, output side) elements outside units on one GPU of rank `rank`: what
    `edge_params` gives less the MTP units of its last chunk (`chunk_units`)."""
    first, (last_d, last_e) = edge_params(job, layout, rank)
    mtp = 0.0
    if rank == layout.mtp_rank(job.arch.num_layers, job.arch.mtp_num_layers):
        depths = 1 if job.arch.mtp_use_repeated_layer else job.arch.mtp_num_layers
        count = depths * len(job.arch.mtp_kinds)
        mtp = sum(d + e for d, e in units[-1][len(units[-1]) - count :])
    return first, max(last_d + last_e - mtp, 0.0)


Moment = tuple[int | None, float]
"""One moment of a model chunk's step: how many of its units, counted in forward order, hold the
running micro-batch's activations then (the units from the first up to the one running: the
forward's unit i and the backward's unit i i + 1, the output side's bucket every unit, the
embedding's none; None: held all step), and the bytes of the unit buffers alive then."""

Profile = tuple[tuple[Moment, ...], ...]
"""Each model chunk's moments (`Moment`), on one GPU of a pipeline rank."""


def transient_and_resident(
    job: Job, layout: Layout, rank: int, chunks: Chunks
) -> tuple[float, float]:
    """(transient, resident) bytes of Megatron-FSDP's unsharded buffers on one GPU of pipeline
    rank `rank` (ZeRO 2, 3; (0, 0) below): the most its units' gathered parameters and gradient
    buckets hold at once over the step (`profile_and_resident`'s largest moment), and the
    parameters outside units kept gathered all step at ZeRO 3."""
    moments, resident = profile_and_resident(job, layout, rank, chunks)
    return largest(moments), resident


def largest(profile: Profile) -> float:
    """A profile's largest moment's bytes (0 for none)."""
    return max((b for chunk in profile for _, b in chunk), default=0.0)


def profile_and_resident(
    job: Job, layout: Layout, rank: int, chunks: Chunks
) -> tuple[Profile, float]:
    """Megatron-FSDP's unit buffers on one GPU of pipeline rank `rank` at each moment of a
    micro-batch's forward and backward through each chunk (`Profile`; () below ZeRO 2): the
    forward's window at each unit; at each backward step the window and the queue (emptied at
    each micro-batch's post-backward, megatron_fsdp.py:876-901); under double buffering the pool,
    held all step. And the parameters outside units kept gathered all step at ZeRO 3 (none where
    the dense group's buffers are not distributed: they are the persistent weights then). Bytes
    by group: `megatron_fsdp_bytes`."""
    if layout.zero_stage < 2:
        return (), 0.0
    raw, per_chunk, (first, last) = _padded_chunks(job, layout, rank, chunks)
    prices = chunk_prices(job, layout, rank, chunks)
    edge = grad_prices(job, layout)[0]  # the buckets outside units: the dense group's
    h, n = job.arch.hidden_size, job.optimizer_instances  # HSDP shards over dp / instances
    dense_group = layout.dense_dp // n
    out: list[tuple[Moment, ...]] = []
    if layout.fsdp_double_buffer:  # the pools every chunk's allocator grows, held all step
        pools = (max_pools if layout.fsdp_max_pool else fixed_pools)(per_chunk, prices)
    for c, units in enumerate(per_chunk):
        head = first if c == 0 else 0.0
        tail = last if c == len(per_chunk) - 1 else 0.0
        head, tail = padded(head, dense_group, h), padded(tail, dense_group, h)
        total = sum(d + e for d, e in units) + head + tail
        bucket = bucket_size(layout, total)
        # one bucket outside units (no bucket size, or an embedding under it beside the output
        # layer): allocated at the output layer's gradient, held to the backward's end
        split = bucket is not None and not (head and tail and head < bucket)
        held = head + tail if tail and not split else 0.0
        if layout.fsdp_double_buffer:
            alive = (held or max(head, tail)) * edge + running(units, prices[c]) + pools
            if not layout.fsdp_max_pool:  # the fixed pool's backup allocator
                alive += apart(units, prices[c], "grad") + apart(units, prices[c], "pool")
            out.append(((None, alive),))
            continue
        size = unit_size(job, layout, raw[c], total)
        ends = (head if split or not held else 0.0, 0.0 if held else tail)
        out.append(chunk_moments(units, prices[c], ends, held, size, edge))
    kept = layout.zero_stage == 3 and sharded(job, layout)[0]
    return tuple(out), (first + last) * weight_bytes(job) if kept else 0.0


def _padded_chunks(
    job: Job, layout: Layout, rank: int, chunks: Chunks
) -> tuple[list[list[Unit]], list[list[Unit]], tuple[float, float]]:
    """Each chunk's units on one GPU of rank `rank` (`chunk_units`), the same padded (`padded`,
    over each distributed-optimizer instance's slice of the groups: HSDP), and the (embedding
    side, output side) elements outside units (`_edges`)."""
    raw = chunk_units(job, layout, rank, chunks)
    h, n = job.arch.hidden_size, job.optimizer_instances
    dense_group, expert_group = layout.dense_dp // n, layout.expert_dp // n
    per_chunk = [
        [(padded(d, dense_group, h), padded(e, expert_group, h)) for d, e in units] for units in raw
    ]
    return raw, per_chunk, _edges(job, layout, rank, raw)


def step_bytes(job: Job, layout: Layout, rank: int, chunks: Chunks) -> float:
    """Bytes of Megatron-FSDP's unit buffers alive on one GPU of pipeline rank `rank` at the
    optimizer step (0 below ZeRO 2). Every micro-batch's post-backward has emptied the queue
    (megatron_fsdp.py:893-901, pgb:3860) and released its units (:699-700); the step's end
    gathers each chunk's first parameter again for the next forward (distrib_optimizer.py:
    3181-3185 start_param_sync; megatron_fsdp.py:1302-1308, overlapped at ZeRO 3, :328-330),
    while the step's fp32 gradient copies live to the next zero_grad_buffer. At ZeRO 3 without
    double buffering: each chunk's first window, unit 0's forward window (`unit_windows`) or,
    where the embedding comes first (outside units, kept gathered), the groups its prefetch adds
    (`window`; counted as if the output side's bucket, gathered already, took none of P). Under
    double buffering the pool, shared by every chunk (one named global buffer,
    utils.py:783-795), stays allocated (pgb:856-860): two units' gradients, at ZeRO 3 their
    parameters too, with the units of the chunks' first windows outside the pool (the backup
    allocator's; the embedding's gather prefetches nothing, pgb:4441-4450); the max pool holds
    every unit, those windows' too (`max_pools`). Bytes by group as in the backward
    (`megatron_fsdp_bytes`)."""
    if layout.zero_stage < 2:
        return 0.0
    raw, per_chunk, (first, _) = _padded_chunks(job, layout, rank, chunks)
    prices = chunk_prices(job, layout, rank, chunks)
    if layout.fsdp_double_buffer and layout.fsdp_max_pool:
        return max_pools(per_chunk, prices)
    if layout.fsdp_double_buffer:
        held = fixed_pools(per_chunk, prices)
        for c, (units, p) in enumerate(zip(per_chunk, prices, strict=True)):
            # the gather and its prefetch: two units, none after the embedding's
            lead = list(zip(units, p, strict=True))[: 0 if c == 0 and first else 2]
            pooled = pool(units, p, "pool")[0]
            held += sum(cost(u, q.fwd) for u, q in lead if shape(u, q.pool) != pooled)
        return held
    if layout.zero_stage < 3:
        return 0.0
    held = 0.0
    for c, units in enumerate(per_chunk):
        total = sum(d + e for d, e in units) + (first if c == 0 else 0.0)
        prefetch = unit_size(job, layout, raw[c], total) // 2
        if c == 0 and first:  # the embedding's gather: the groups it prefetches
            groups = [
                g for u, p in zip(units, prices[c], strict=True) for g in _priced(u, p.fwd) if g[0]
            ]
            held += window(groups, prefetch)
        elif units:
            held += unit_windows(units, prefetch, prices[c])[0][0]
    return held


def chunk_moments(
    units: list[Unit],
    prices: Sequence[Price],
    ends: tuple[float, float],
    held: float,
    size: float,
    edge: float,
) -> tuple[Moment, ...]:
    """A chunk's moments without double buffering, for units of these (padded) elements at
    `prices` (one per unit, `megatron_fsdp_bytes`), the (embedding, output side) buckets in
    `ends`, `held` elements of one bucket outside units held through the backward, the
    buckets outside units at `edge` bytes an element, and unit size C = `size`."""
    fwd, back = unit_windows(units, size // 2, prices)
    out: list[Moment] = [(i + 1, f) for i, f in enumerate(fwd)]
    steps = backward_steps(units, *ends, prices, edge)
    for k, ((i, _), alive) in enumerate(zip(steps, queue_alive(steps, size), strict=True)):
        if i is not None:
            out.append((i + 1, alive + held * edge + back[i]))
        else:  # the output side's bucket comes first, the embedding's last
            out.append((len(units) if k == 0 and ends[1] else 0, alive + held * edge))
    return tuple(out)
