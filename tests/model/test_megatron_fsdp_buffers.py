"""Megatron-FSDP's gathered units, gradient queue and parameters outside units
(`planner.model.megatron_fsdp`).

Oracles: NVIDIA/Megatron-LM d98e8a64, megatron/core/distributed/fsdp/src/megatron_fsdp/
(pgb: param_and_grad_buffer.py):
- megatron_fsdp.py:420-444: unit size unset under optim_grads_params, C = max(1e9,
  2 x (unit elements // units)); queue capacity C, all-gather prefetch C // 2;
- pgb:3935-3948: before a group's reduce-scatter the queue pops its oldest entries while
  their sum exceeds C, then appends it (:4254); a bucket is freed only when popped (:4230-4250);
- pgb:4487-4510: a gather adds the next bucket groups while the prefetched sum is below C // 2;
- megatron_fsdp.py:969-974, :1093-1113, pgb:4339-4386: parameters outside units stay gathered;
- pgb:2524-2576, :3956-3978, :4420-4432: double buffering, a pool of two units each way.
The expected bytes are hand arithmetic on Llama 3.1 8B's shapes; the queue and the window are
also checked against brute-force transcriptions of those lines over random unit sizes.
"""

from __future__ import annotations

import random

import pytest
from jobs import h100_cluster

from planner.emit import megatron
from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan
from planner.model import buffers, fsdp2, megatron_fsdp, megatron_fsdp_pool, memory
from planner.model.megatron_fsdp_bytes import ELEMENTS
from planner.model.rank_states import rank_state, step_bytes
from planner.model.stage_activations import per_layer, shard

# Llama 3.1 8B at tp 1: a decoder layer 2 x 4,096^2 (q, o) + 2 x 4,096 x 1,024 (k, v)
# + 3 x 4,096 x 14,336 (gate, up, down) + 2 x 4,096 (norms) = 218,112,000 elements; the
# output layer 128,256 x 4,096 = 525,336,576 (untied) with the final norm's 4,096; the word
# embedding 525,336,576. Buckets padded to multiples of dp 8 x h 4,096 = 32,768 (pgb:285-288,
# `megatron_fsdp.padded`): a layer 6,657 x 32,768, the output side 16,033 x 32,768.
U, OUT, NORM = 218_112_000, 525_336_576, 4_096
TAIL, EMB = OUT + NORM, OUT
U_PAD, TAIL_PAD = 6_657 * 32_768, 16_033 * 32_768


def _gathered(units: list, prefetch: float) -> tuple[float, list[float]]:
    """Unit elements gathered without double buffering: the most at once in a forward, and at
    each unit's backward (`megatron_fsdp.unit_windows` counting elements)."""
    fwd, back = megatron_fsdp.unit_windows(units, prefetch)
    return max(fwd, default=0.0), back


def _double_buffered(units: list) -> float:
    """One chunk's fixed pool and its backup allocator's units, in elements (`pool` + `apart`)."""
    prices = [ELEMENTS] * len(units)
    return 2 * megatron_fsdp_pool.pool(units, prices, "grad")[1] + megatron_fsdp_pool.apart(
        units, prices, "grad"
    )


def _llama8b(**parallel: object) -> tuple:
    plan = parse_plan(
        {
            "model": {"name": "llama3.1-8b"},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
            "training": {
                "seq_length": 8192,
                "global_batch_size": 64,
                "precision": "bf16",
                "main_grad_dtype": "bf16",
            },
            "parallel": {"tp": 1, "pp": 1, "micro_batch_size": 1, "zero_stage": 3, **parallel},
        }
    )
    job, lay = plan.job, plan.require_layout()
    assert job.cluster.num_gpus == h100_cluster(8).num_gpus and lay.dp * lay.pp == 8
    return job, lay, lay.chunk_layers(job.arch.num_layers)[0]


def test_llama8b_zero3_window_queue_and_outside_units() -> None:
    """By hand, 32 units of U: C = max(1e9, 2 x U) = 1e9, P = 5e8. Window: U, 2U < P <= 3U, so
    a unit with three below holds 4U gathered. Queue (bf16 gradients, 2 B): the output layer's
    bucket TAIL first, then a unit each step: alive TAIL + U, + 2U, + 3U, then at the fourth
    unit TAIL + 4U (its queue TAIL + 3U > C pops TAIL only after); from there 6U at most (five
    queued, 5U > C pops one, and its own); at the end the embedding's bucket beside 5U, with
    nothing gathered. The most at once: the fourth unit, (TAIL + 4U) x 2 + 4U x 2 bytes, each
    bucket padded (U_PAD, TAIL_PAD; the counts are those of the raw sizes). Outside units,
    gathered all step: EMB + TAIL at 2 B.
    (Before, a18f1ea: (OUT + U) x (2 + 2), nothing kept gathered.)"""
    job, lay, chunks = _llama8b()
    assert (job.grad_bytes, megatron_fsdp.unit_size(job, lay, [(U, 0.0)] * 32, 0)) == (2.0, 1e9)
    _, _, _, cache, transient = rank_state(job, lay, 0, chunks)
    assert transient == pytest.approx((TAIL_PAD + 4 * U_PAD) * 2 + 4 * U_PAD * 2)
    assert cache == pytest.approx((EMB + TAIL) * 2)
    # the rule's pieces on the units alone: 4 gathered, 6 gradient buckets at the steady state
    fwd, back = _gathered([(U, 0.0)] * 32, 5e8)
    assert (fwd, back[16], back[2]) == pytest.approx((4 * U, 4 * U, 3 * U))
    steps = megatron_fsdp.backward_steps([(U, 0.0)] * 32, 0.0, 0.0)
    assert max(megatron_fsdp.queue_alive(steps, 1e9)) == pytest.approx(6 * U)


def test_llama8b_zero3_queue_coupled_with_the_activations_it_drains() -> None:
    """The buffers above beside the activations held at each moment (no recompute, pp 1: every
    micro-batch's backward starts with its 32 layers' b bytes held, the queue empty,
    megatron_fsdp.py:876-901; a layer's backward frees them). A = the activations' peak; bf16
    gradients and weights, 2 B; j counts the backward's steps:
      j = 0  output layer's bucket   A                 + TAIL x 2
      j = 1  layer 31                A                 + (TAIL + U) x 2  + 4U x 2
      j = 2  layer 30                A - b             + (TAIL + 2U) x 2 + 4U x 2
      j = 3  layer 29                A - 2b            + (TAIL + 3U) x 2 + 4U x 2
      j = 4  layer 28                A - 3b            + (TAIL + 4U) x 2 + 4U x 2   (the bound)
      j = 5  layer 27                A - 4b            + 5U x 2          + 4U x 2
    (j = 5: the queue TAIL + 3U > C popped TAIL at j = 4, then 4U <= C stays, with the layer's
    own). The forward holds at most A + 4U x 2. Each step adds 2U x 2 B of gradients while it
    frees b, and b > 2U x 2 = 0.87 GB (asserted: a layer's activations of 8,192 tokens), so the
    peak is j = 1: the buffers add (TAIL + U) x 2 + 4U x 2 to A, not j = 4's (TAIL + 4U) x 2 +
    4U x 2 (before: that bound, 1.3 GB more). At the optimizer step: `test_at_the_step_*`."""
    job, lay, chunks = _llama8b()
    b = per_layer(job.arch, shard(job, lay)).kept[0]
    assert b > 2 * U_PAD * 2  # the premise: each step frees more than it queues
    steps = [(TAIL_PAD, 0.0, 0)] + [(TAIL_PAD + j * U_PAD, 4 * U_PAD, j - 1) for j in (1, 2, 3, 4)]
    steps.append((5 * U_PAD, 4 * U_PAD, 4))
    added = [(queued + window) * 2 - done * b for queued, window, done in steps]
    assert max(added) == added[1] == (TAIL_PAD + U_PAD) * 2 + 4 * U_PAD * 2
    bound = (TAIL_PAD + 4 * U_PAD) * 2 + 4 * U_PAD * 2
    _, _, _, cache, transient = rank_state(job, lay, 0, chunks)
    assert transient == pytest.approx(bound)
    st = memory.stage_memory(job, lay, 0, chunks)
    frag = memory.fragmentation(job)
    counted, outside = buffers.fixed_bytes(job, lay)
    counted += fsdp2.pipeline_buffers(job, lay, 0) + buffers.dataloader_mask_bytes(job, lay, 0)
    assert st.other == pytest.approx(cache + added[1] * frag + counted + outside)


def test_at_the_step_only_the_next_forwards_first_window() -> None:
    """At the optimizer step (megatron_fsdp.py:893-901 emptied the queue, :699-700 released every
    unit) the buffers alive are what the step's end gathers for the next forward:
    distrib_optimizer.py:3181-3185 calls start_param_sync, which at ZeRO 3 (overlap forced,
    megatron_fsdp.py:328-330) gathers the chunk's first parameter with prefetch (:1302-1308).
    On rank 0 that is the word embedding (outside units, gathered already); its prefetch adds
    unit groups while the prefetched sum is below P = 5e8 (pgb:4487-4510): U_PAD, 2 U_PAD =
    436,273,152 < 5e8, so 3 U_PAD, at 2 B. `grad_copy` is what the step holds beyond `other`
    (which counts the backward's coupled buffers, (TAIL + U) x 2 + 4U x 2 here): the fp32
    copies + 3 U_PAD x 2 - that. (Before: + the backward's bound, (TAIL + 4U) x 2 + 4U x 2,
    3.55 GB more at the step.)"""
    job, lay, chunks = _llama8b()
    st = memory.stage_memory(job, lay, 0, chunks)
    frag = memory.fragmentation(job)
    copy = step_bytes(job, lay, 0, chunks)
    assert copy > 0  # bf16 gradients: Megatron-FSDP's fp32 copy at the step
    coupled = (TAIL_PAD + U_PAD) * 2 + 4 * U_PAD * 2
    assert st.grad_copy == pytest.approx((copy + 3 * U_PAD * 2 - coupled) * frag)


def test_at_the_step_a_later_rank_gathers_its_first_units_window() -> None:
    """pp 2 (16 layers a rank): rank 1's first parameter is its first layer's, so the step's end
    gathers unit 0's forward window: U + the next groups while below P = max(1e9, 2U) // 2 =
    5e8: U + 3U = 4 U_PAD at 2 B (dp 4 now: buckets padded to 4 x 4,096 = 16,384, a layer
    13,313 x 16,384). ZeRO 2 gathers nothing: 0."""
    job, lay, _ = _llama8b(pp=2)
    ranks = lay.chunk_layers(job.arch.num_layers)
    assert megatron_fsdp.step_bytes(job, lay, 1, ranks[1]) == pytest.approx(4 * 13_313 * 16_384 * 2)
    job, lay, _ = _llama8b(pp=2, zero_stage=2)
    assert megatron_fsdp.step_bytes(job, lay, 1, ranks[1]) == 0.0


def test_at_the_step_the_double_buffer_pool_stays() -> None:
    """--fsdp-double-buffer: the FixedPoolAllocator's buffers are named global buffers, kept once
    allocated (pgb:856-860, utils.py:783-795): two units of gradients and of parameters, 2 B
    each; the output layer's gradient bucket (backup allocator) went with the queue, and the
    embedding's gather prefetches nothing under double buffering (pgb:4441-4450): 2 U_PAD x
    (2 + 2) at the step. (Before: the backward's (2U + TAIL) x 2 + 2U x 2.)"""
    job, lay, chunks = _llama8b(fsdp_double_buffer=True)
    assert megatron_fsdp.step_bytes(job, lay, 0, chunks) == pytest.approx(2 * U_PAD * 4)
    st = memory.stage_memory(job, lay, 0, chunks)
    _, _, _, _, transient = rank_state(job, lay, 0, chunks)  # the pool's moment, held all step
    copy = step_bytes(job, lay, 0, chunks)
    frag = memory.fragmentation(job)
    assert st.grad_copy == pytest.approx((copy + 2 * U_PAD * 4 - transient) * frag)


def test_llama8b_double_buffer_holds_two_units_each_way() -> None:
    """--fsdp-double-buffer: the pool's two units of parameters (2 B) and of gradients (2 B),
    beside the output layer's bucket from the backup allocator at the backward's first unit:
    (2U + TAIL) x 2 + 2U x 2; the parameters outside units stay gathered. An explicit unit size
    changes nothing there. (Before, a18f1ea: (OUT + U) x (2 + 2), nothing kept gathered.)"""
    for size in (None, 800_000_000):
        job, lay, chunks = _llama8b(fsdp_double_buffer=True, suggested_communication_unit_size=size)
        _, _, _, cache, transient = rank_state(job, lay, 0, chunks)
        assert transient == pytest.approx((2 * U_PAD + TAIL_PAD) * 2 + 2 * U_PAD * 2)
        assert cache == pytest.approx((EMB + TAIL) * 2)


def test_explicit_unit_size_is_taken_as_it_is() -> None:
    """--suggested-communication-unit-size 8e8 (no 1e9 floor, megatron_fsdp.py:420-421): P = 4e8,
    U < P <= 2U, so 3U gathered; the queue pops while over 8e8: 3U = 654,336,000 stays, 4U
    pops, so 4 queued + own = 5U alive at the steady state."""
    job, lay, _ = _llama8b(suggested_communication_unit_size=800_000_000)
    assert megatron_fsdp.unit_size(job, lay, [(U, 0.0)] * 32, 0) == 8e8
    assert _gathered([(U, 0.0)] * 32, 4e8)[0] == pytest.approx(3 * U)
    steps = megatron_fsdp.backward_steps([(U, 0.0)] * 32, 0.0, 0.0)
    assert max(megatron_fsdp.queue_alive(steps, 8e8)) == pytest.approx(5 * U)


def _brute_queue(units: list[tuple[float, float]], capacity: float) -> float:
    """pgb:3935-3948 and :4254 transcribed: buckets allocated on first write (the unit's groups
    at its backward), each group (experts' first) dispatched after popping the queue's oldest
    while the queue's sum exceeds the capacity; a popped bucket is freed. Returns the most
    allocated at once."""
    allocated: dict[int, float] = {}
    queue: list[int] = []
    most, ident = 0.0, 0
    for d, e in reversed(units):
        groups = [g for g in (e, d) if g]
        ids = list(range(ident, ident + len(groups)))
        ident += len(groups)
        allocated.update(zip(ids, groups, strict=True))
        most = max(most, sum(allocated.values()))
        for b in ids:
            space = sum(allocated[q] for q in queue)
            while space > capacity:
                gone = queue.pop(0)
                space -= allocated.pop(gone)
            queue.append(b)
    return most


def _brute_window(units: list[tuple[float, float]], prefetch: float) -> float:
    """pgb:4487-4510 transcribed over bucket ids (a unit's dense group, then its experts'): in
    the forward each unit's gather takes its ids, then the next id's group while the prefetched
    sum is below `prefetch`; the unit run before is released (megatron_fsdp.py:699-700). The
    most gathered at once."""
    sizes = [g for d, e in units for g in (d, e) if g]
    owner = [i for i, (d, e) in enumerate(units) for g in (d, e) if g]
    held: set[int] = set()
    most = 0.0
    for i in range(len(units)):
        mine = [b for b, o in enumerate(owner) if o == i]
        held -= {b for b in held if owner[b] < i}
        got, base = list(mine), sum(sizes[b] for b in mine)
        nxt = max(mine) + 1
        while nxt < len(sizes) and sum(sizes[b] for b in got) - base < prefetch:
            got.append(nxt)  # a group per (unit, expert flag): one bucket here
            nxt += 1
        held |= set(got)
        most = max(most, sum(sizes[b] for b in held))
    return most


@pytest.mark.parametrize("seed", range(40))
def test_queue_and_window_against_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 24)
    units = [
        (rng.uniform(1e7, 6e8), rng.uniform(1e7, 6e8) if rng.random() < 0.4 else 0.0)
        for _ in range(n)
    ]
    capacity = rng.choice([1e8, 5e8, 1e9, 2e9, 5e9])
    steps = megatron_fsdp.backward_steps(units, 0.0, 0.0)
    assert max(megatron_fsdp.queue_alive(steps, capacity)) == pytest.approx(
        _brute_queue(units, capacity)
    )
    fwd, _ = _gathered(units, capacity // 2)
    assert fwd == pytest.approx(_brute_window(units, capacity // 2))


LINE = (
    "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
    "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
    "--num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 "
    "--position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear "
    "--untie-embeddings-and-output-weights --vocab-size 128256 --tokenizer-type NullTokenizer "
    "--micro-batch-size 1 --global-batch-size 32 --bf16 --use-megatron-fsdp "
    "--use-distributed-optimizer --ckpt-format fsdp_dtensor --overlap-grad-reduce "
    "--overlap-param-gather --lr 1e-4 "
)


@pytest.mark.parametrize(
    "extra",
    ["--fsdp-double-buffer", "--use-nccl-ub", "--megatron-fsdp-max-pool-double-buffer"],
)
def test_megatron_flags_read_and_written_back(extra: str) -> None:
    """arguments.py:1172-1181 (d98e8a64): --use-nccl-ub and the max-pool allocator turn
    fsdp_double_buffer on under Megatron-FSDP; the unit size is an int (:3207). planner's
    launch writes both back (a18f1ea read neither)."""
    line = f"{LINE}{extra} --suggested-communication-unit-size 800000000"
    plan = parse_plan(megatron_args.to_plan(line, "h100-sxm-80gb", 8))
    lay = plan.require_layout()
    assert (lay.fsdp_double_buffer, lay.suggested_communication_unit_size) == (True, 800_000_000)
    args = megatron.arguments(plan)
    flags = {a[0]: a[1:] for a in (*args.parallel, *args.training)}
    assert flags["--fsdp-double-buffer"] == ()
    assert flags["--suggested-communication-unit-size"] == ("800000000",)


def test_bad_values_are_refused() -> None:
    """A unit size below 1 on the line, or in a plan; the double buffer beside the EP overlap,
    which mcore_fsdp_adapter.py:177-181 asserts against: exit 2 naming the field and value."""
    with pytest.raises(InputError, match="--suggested-communication-unit-size: 0"):
        megatron_args.to_plan(f"{LINE}--suggested-communication-unit-size 0", "h100-sxm-80gb", 8)
    with pytest.raises(InputError, match="suggested_communication_unit_size"):
        _llama8b(suggested_communication_unit_size=0)
    with pytest.raises(InputError, match="fsdp_double_buffer"):
        parse_plan(
            {
                "model": {"name": "qwen3-30b-a3b"},
                "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16},
                "training": {"seq_length": 4096, "global_batch_size": 64},
                "parallel": {
                    "ep": 8,
                    "zero_stage": 3,
                    "ep_comm_overlap": True,
                    "fsdp_double_buffer": True,
                },
            }
        ).require_layout()


def test_the_double_buffer_pool_takes_the_most_numerous_shape() -> None:
    # FixedPoolAllocator (pgb:676-698 d98e8a64) pools the most numerous group of units with
    # equal buckets (the first in unit order where counts tie); the others are allocated apart
    # (:842-848), two at most beside the pool (the prefetch and the queue stop at two units).
    # DeepSeek-V2-Lite's shape: one dense layer of 81 beside 26 MoE layers of (31, 34): the
    # pool is two MoE units and the dense layer sits beside it: 2 x (31 + 34) + 81 = 211
    assert _double_buffered([(81.0, 0.0)] + 26 * [(31.0, 34.0)]) == 211.0
    # three dense layers of 50 beside 58 MoE layers of (20, 30): 2 x 50 + 2 x 50 = 200
    assert _double_buffered(3 * [(50.0, 0.0)] + 58 * [(20.0, 30.0)]) == 200.0
    # a tie: the first shape pools, the second is apart: 2 x 10 + 20 = 40
    assert _double_buffered([(10.0, 0.0), (20.0, 0.0)]) == 40.0
    # one shape: the pool alone, two units
    assert _double_buffered(4 * [(7.0, 0.0)]) == 14.0


def test_mxfp8_double_buffer_counts_the_transpose_pool() -> None:
    """--fp8-recipe mxfp8 --fp8-param-gather under --fsdp-double-buffer (pgb d98e8a64): a unit's
    FP8 weights form their own groups in uint8 (dtype "float8", pgb:1795-1798, :2631-2632), 1 B
    an element, gathered rowwise into the `fsdp_params` pool (:2533-2538) and, for the backward,
    columnwise into a second pool, `fsdp_fp8_transpose_params` (:2539-2544; the transpose buffer
    exists for MXFP8 tensors only, :2634-2643, mixed_precision.py:183-185), each two units and
    kept. Its norms (8,192 of U) stay bf16 in the first pool. So the two pools hold 2 units x
    (1 + 1) B per FP8 element, 2 B per norm element: 2 U_PAD x 2 B, what planner's 2-byte
    parameter pool comes to, beside the gradients' (2 U_PAD + TAIL_PAD) x 2 B (bf16 gradients).
    Hand arithmetic; it held before this test too (the 1-byte pool at `weight_bytes`' 2 B
    already covered the transpose pool's byte)."""
    plan = parse_plan(
        {
            "model": {"name": "llama3.1-8b"},
            "cluster": {"gpu": "b200-sxm-180gb", "num_gpus": 8},
            "training": {
                "seq_length": 8192,
                "global_batch_size": 64,
                "precision": "fp8",
                "fp8_recipe": "mxfp8",
                "fp8_param_gather": True,
                "main_grad_dtype": "bf16",
            },
            "parallel": {"zero_stage": 3, "fsdp_double_buffer": True, "micro_batch_size": 1},
        }
    )
    job, lay = plan.job, plan.require_layout()
    assert (job.low_precision_params, job.quant_recipe, lay.dp) == (True, "mxfp8", 8)
    _, _, _, _, transient = rank_state(job, lay, 0, lay.chunk_layers(job.arch.num_layers)[0])
    pools = 2 * (U - 2 * NORM) * (1 + 1) + 2 * (2 * NORM) * 2  # raw elements, both pools
    assert pools == 2 * U * 2
    assert transient == pytest.approx((2 * U_PAD + TAIL_PAD) * 2 + 2 * U_PAD * 2)
