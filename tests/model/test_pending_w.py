"""What torchtitan's InterleavedZeroBubble keeps between a chunk micro-batch's I and its W beyond
its activations (planner.model.pending_w), and the peak walked with it (`looped_order.
deferred_peak`, `in_flight.schedule_peak`, `stage_activations`).

Oracles: pytorch/pytorch torch/distributed/pipelining _backward.py `stage_backward_input` (a
prehook on each parameter-owning node stores the gradient flowing into it, `param_group["grads"]
[i] = grad_inputs`, freed by `stage_backward_weight`'s `del param_group["grads"]`) and stage.py
`backward_one_chunk(full_backward=False)` (`backward_state[bwd_chunk_id] = (input_values,
param_groups, stage_output, output_grads)`, popped by `backward_weight_one_chunk`; the first stage
runs nothing at I), so per Llama layer the output gradients of wq, wk, wv, wo, w1, w3, w2 and the
two RMSNorm scales, written out by hand below; each rank's order from torch's construction
(`looped_order.rank_order`, checked against schedules.py in tests/model/test_looped_order.py)
walked by brute force.

Knowingly not counted: non-reentrant activation checkpointing under the split backward.
torchtitan b5bcd76c wraps each block with checkpoint_wrapper(..., early_stop=False)
(distributed/activation_checkpoint.py:176-181); torch.utils.checkpoint's unpack hook recomputes
per graph task id, and I and each W param group are separate autograd.grad calls, so without a
GraphExecGroup around them each recomputes the block, and whatever a task does not unpack stays
in `frame.recomputed` until the graph dies (pytorch issue 136766: zero bubble with AC OOMed;
GraphExecGroup, PR 166536, recomputes once per group). Whether 00722e64's pipelining enters one
was not established from the stored sources."""

from __future__ import annotations

import random
import tomllib

import pytest
from plan_text import titan_job

from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.model import stage_activations
from planner.model.in_flight import schedule_peak
from planner.model.looped_order import deferred_peak, per_round, rank_order
from planner.model.pending_w import layer_grads
from planner.model.stage_activations import activation_parts, per_layer, shard
from planner.model.torch_schedules import refusal
from planner.search.rules import check_plan

ZB = "InterleavedZeroBubble"


def _walk(pp: int, m: int, r: int, kept: tuple[float, ...], pending: tuple[float, ...]) -> float:
    """Brute force: the live chunk micro-batches after each action of torch's order, each
    holding kept[c] from F to W and pending[c] from I to W."""
    fwd: set[tuple[int, int]] = set()
    back: set[tuple[int, int]] = set()
    peak = 0.0
    for kind, i, c in rank_order(ZB, pp, len(kept), m, r):
        if kind == "F":
            fwd.add((i, c))
        elif kind == "I":
            back.add((i, c))
        else:
            fwd.remove((i, c))
            back.remove((i, c))
        now = sum(kept[c] for _, c in fwd) + sum(pending[c] for _, c in back)
        peak = max(peak, now)
    return peak


def test_deferred_peak_is_the_walk() -> None:
    """Every rank, every m torch runs up to 3 pp, random bytes; with nothing pending it is the
    activations' peak as before (`schedule_peak` under DEFERRED_W)."""
    rng = random.Random(7)
    for pp in range(2, 6):
        for v in (2, 3):
            lay = Layout(tp=1, pp=pp, dp=1, vpp=v)
            for m in range(1, 3 * pp + 1):
                if refusal(ZB, pp, m):
                    continue
                for r in range(pp):
                    kept = tuple(rng.uniform(0.5, 3.0) for _ in range(v))
                    pend = tuple(rng.uniform(0.1, 2.0) for _ in range(v))
                    got = schedule_peak(kept, lay, r, m, ZB, per_round(pp, m), pending=pend)
                    assert got == pytest.approx(_walk(pp, m, r, kept, pend), rel=1e-12)
                    zero = deferred_peak(pp, m, r, kept, (0.0,) * v)
                    assert zero == pytest.approx(
                        schedule_peak(kept, lay, r, m, ZB, per_round(pp, m))
                    )


def test_pp2_by_hand() -> None:
    """pp 2, v 2, m 2 (g 2), rank 1: warm-up (v - 1) g + pp - 1 - r = 2 forwards (F0c0 F1c0),
    then F0c1 I0c1 W0c1 (from backward step r = 1 on a W follows each I: step 0's I has none),
    ...: rank 1's order F0c0 F1c0 F0c1 I0c1 F1c1 I1c1 W0c1 I0c0 W1c1 I1c0 W0c0 W1c0. With kept
    1 and pending 10 on every chunk: after I1c1 it holds 4 forwards and 2 pending Is: 24."""
    order = rank_order(ZB, 2, 2, 2, 1)
    assert [f"{k}{i}c{c}" for k, i, c in order] == (
        [
            "F0c0",
            "F1c0",
            "F0c1",
            "I0c1",
            "F1c1",
            "I1c1",
            "W0c1",
            "I0c0",
            "W1c1",
            "I1c0",
            "W0c0",
            "W1c0",
        ]
    )
    assert deferred_peak(2, 2, 1, (1.0, 1.0), (10.0, 10.0)) == 24.0


def _plan(recompute: str) -> tuple[object, Layout]:
    text = titan_job(gbs=32) + (
        f'[parallel]\npp = 2\nvpp = 2\nzero_stage = 3\nrecompute = "{recompute}"\n'
        f'[torchtitan]\npipeline_schedule = "{ZB}"\n'
    )
    plan = check_plan(parse_plan(tomllib.loads(text)))
    return plan.job, plan.require_layout()


def test_llama8b_pending_by_hand() -> None:
    """Llama 3.1 8B (h 4096, 8 KV heads of 128, f 14336, vocabulary 128256, 32 layers), 8192
    tokens, tp 1, bf16: a layer's output gradients 2 x 8192 x [(4096 + 2 x 1024 + 2 x 14336)
    (wq wk wv w1 w3) + 2 x 4096 (wo w2) + 2 x 4096 (the two norms)] = 2 x 8192 x 51200 bytes.
    pp 2 x vpp 2 on torchtitan's split (the embedding and output counted as layers: stages 0 to 3
    of 8, 9, 8 and 7 decoder layers, `Layout.chunk_layers`): rank 0 chunk 0 (the first stage)
    keeps its output alone, 2 x 8192 x 4096; the middle stages their layers and output; rank 1
    chunk 1 (the last stage) its layers, the final norm's 8192 x 4096 and the logits'
    8192 x 128256."""
    job, lay = _plan("selective")
    sh = shard(job, lay)
    t, h = 8192, 4096
    layer = 2 * t * (h + 2 * 1024 + 2 * 14336 + 2 * h + 2 * h)
    assert layer_grads(job.arch, job.arch.kinds[0], sh, lay) == layer
    chunks = lay.chunk_layers(job.arch.num_layers)
    per = per_layer(job.arch, sh)
    p0 = activation_parts(job, lay, 0, chunks[0], sh, per).pending
    p1 = activation_parts(job, lay, 1, chunks[1], sh, per).pending
    n = [len(c) for r in (0, 1) for c in chunks[r]]
    assert n == [8, 8, 9, 7]
    assert p0 == (2 * t * h, 8 * layer + 2 * t * h)
    assert p1 == (9 * layer + 2 * t * h, 7 * layer + 2 * (t * h + t * 128256))


def test_llama8b_peak_counts_the_pending() -> None:
    """The same plan's activations on rank 1 (the last: the most pending, r + 1 after an I)
    are its `stage_activations` peak walked with the pending bytes: what one walk adds over the
    activations alone (brute force `_walk`), on top of everything else the rank holds. Before,
    the pending W's gradients were not counted: the estimate equalled the walk without them."""
    job, lay = _plan("selective")
    sh = shard(job, lay)
    per = per_layer(job.arch, sh)
    chunks = lay.chunk_layers(job.arch.num_layers)
    parts = activation_parts(job, lay, 1, chunks[1], sh, per)
    m = lay.num_microbatches(job.global_batch_size)
    with_w = _walk(2, m, 1, parts.kept, parts.pending)
    without = _walk(2, m, 1, parts.kept, (0.0, 0.0))
    assert with_w > without + 2 * 8192 * 128256 * 2  # at least one logits gradient more
    whole = stage_activations.stage_activations(job, lay, 1, chunks[1], sh, per)
    assert whole - with_w == pytest.approx(
        stage_activations.peak_bytes(job, lay, 1, sh, per, parts._replace(pending=())) - without,
        rel=1e-12,
    )
