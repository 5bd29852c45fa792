"""torchtitan's V schedules place stages r and 2 pp - 1 - r on pipeline rank r
(`Layout.v_stages`): rank 0 holds the first and the last stage, the embedding beside the output
layer and the loss, and its memory is counted so.

Oracles: torchtitan's source for the placement (e347b1e5 distributed/pipeline_parallel.py:447-469
`_get_stage_indices`, b5bcd76c :551-567 `_get_pp_rank_to_stage_indices_mapping`: rank r runs
zip(range(pp), range(2 pp - 1, pp - 1, -1))[r], the looped schedules r + c x pp) and for its
default split (`generate_llm_fqn_per_model_part`, first and last stage one layer less: 32 + 2
over 4 stages, 9 9 8 8 less the embedding and the output); hand arithmetic on Llama 3.1 8B's shape
(hidden 4096, 32 layers, 32 query heads and 8 KV heads of 128, FFN 14336 SwiGLU, vocabulary
128256, untied) for the parameters, with FSDP2's bytes per parameter (fp32 shard over dp 4 and,
under pipelining, the bf16 parameters kept gathered and the fp32 gradients unsharded:
planner.model.fsdp2's docstring), torch pipelining's receive buffers (one per micro-batch for
each stage input and gradient that comes from another stage), and the V's micro-batches in
flight (2 pp - 1 - r of chunk 0, DualPipeV 2 pp - r, and r + 1 of chunk 1: stage_activations'
docstring) times each stage's layers."""

from __future__ import annotations

import tomllib

import pytest
from plan_text import titan_pp2_vpp2

from planner.inputs.layout import Layout
from planner.inputs.plan import Job, Plan, parse_plan
from planner.model import activations as act
from planner.model import fsdp2, memory
from planner.model.layer_kept import chunk_kept
from planner.model.loss_activations import logits_bytes
from planner.model.stage_activations import activation_parts, peak_bytes, per_layer, shard
from planner.model.stage_params import stage_params
from planner.search.rules import check_plan, violations

H, V = 4096, 128256
LAYER = 2 * H * H + 2 * H * 1024 + 3 * H * 14336 + 2 * H
"""One decoder layer: q and o 4096 x 4096, k and v 4096 x 1024 (8 KV heads of 128), gate, up
and down 4096 x 14336, two RMSNorm weights: 218,112,000."""
EDGE = V * H
"""The embedding, and the (untied) output layer: 525,336,576 each."""


def titan_plan(schedule: str, recompute: str = "none") -> Plan:
    """Llama 3.1 8B on 8 H100 under torchtitan: pp 2 x vpp 2 (4 stages, torchtitan's own
    split), dp 4 (FSDP2), 32 sequences of 8192: m = 8 micro-batches."""
    text = titan_pp2_vpp2(schedule, recompute)
    return check_plan(parse_plan(tomllib.loads(text)))


def _job_layout(schedule: str, recompute: str = "none") -> tuple[Job, Layout]:
    plan = titan_plan(schedule, recompute)
    return plan.job, plan.require_layout()


STAGES = ("E" + "t" * 8, "t" * 9, "t" * 8, "t" * 7 + "L")
"""torchtitan's default split of 32 layers over 4 stages (module docstring)."""
RANGES = (range(0, 8), range(8, 17), range(17, 25), range(25, 32))
"""Each stage's decoder layers, numbered in stage order."""


def _torchtitan_stages(rank: int, pp: int, v: bool) -> tuple[int, ...]:
    """The stages torchtitan builds on `rank` (module docstring: its two formulas)."""
    if v:
        return list(zip(range(pp), range(2 * pp - 1, pp - 1, -1), strict=True))[rank]
    return tuple(rank + c * pp for c in range(2))


@pytest.mark.parametrize("schedule", ["ZBVZeroBubble", "DualPipeV", "Interleaved1F1B"])
def test_each_rank_holds_the_stages_torchtitan_builds_on_it(schedule: str) -> None:
    """ZBVZeroBubble and DualPipeV: rank 0 stages 0 and 3 (embedding, output layer and loss),
    rank 1 stages 1 and 2; Interleaved1F1B with the same stages: rank 0 stages 0 and 2, rank 1
    stages 1 and 3 (the loss)."""
    _, lay = _job_layout(schedule)
    v = schedule != "Interleaved1F1B"
    assert lay.v_stages is v
    assert lay.stages(32) == STAGES  # stage order, whatever the placement
    for rank, chunks in enumerate(lay.chunk_layers(32)):
        assert chunks == tuple(RANGES[k] for k in _torchtitan_stages(rank, 2, v))
    assert lay.output_rank == (0 if v else 1)
    assert lay.stage_layers(32) == ((8 + 7, 9 + 8) if v else (8 + 8, 9 + 7))


def test_rank_zero_weights_hold_the_embedding_and_the_output_layer() -> None:
    """Under ZBVZeroBubble rank 0 holds 15 layers, the embedding, the output layer and the final
    norm; rank 1 17 layers and nothing else. FSDP2 over dp 4 under pipelining: weights 4 / 4 + 2
    bytes a parameter, gradients 4 / 4 + 4, AdamW 8 / 4 (module docstring); receive buffers
    m = 8 x (8192 x 4096 bf16) each, rank 0 two (stage 0's gradient, stage 3's input), rank 1
    four."""
    job, lay = _job_layout("ZBVZeroBubble")
    chunks = lay.chunk_layers(32)
    held = (15 * LAYER + 2 * EDGE + H, 17 * LAYER)
    for rank in (0, 1):
        assert sum(stage_params(job, lay, rank, chunks[rank])) == held[rank]
    buffer = 8 * 8192 * H * 2
    report = memory.estimate(job, lay)
    for st, params, receives in zip(report.stages, held, (2, 4), strict=True):
        assert st.weights == pytest.approx(3 * params, rel=1e-12)
        assert st.grads == pytest.approx(5 * params, rel=1e-12)
        assert st.optimizer == pytest.approx(2 * params, rel=1e-12)
        assert fsdp2.pipeline_buffers(job, lay, st.stage) == receives * buffer


@pytest.mark.parametrize("schedule", ["ZBVZeroBubble", "DualPipeV"])
def test_activations_count_each_stage_where_it_runs(schedule: str) -> None:
    """Without recompute every layer keeps a, the embedding e: rank 0's stage 0 holds 8 layers
    and the embedding, its stage 3 7 layers, and rank 0 the loss's logits once (torch's cross
    entropy: with the layer working set, none without recompute); rank 1's stage 1 9 layers,
    its stage 2 8.
    In flight at m 8 (torch's order walked, tests/model/test_v_in_flight.py): DualPipeV 4 of
    stage 0 and 1 of stage 3 on rank 0, 3 of stage 1 and 2 of stage 2 on rank 1; ZB-V at the
    warm-up's end 3 and 1, 2 and 2, and at each steady chunk-0 forward 4 and 0, 3 and 1. These
    are the activations alone: the pending Ws' stash (`pending_w`) is left out here and walked in
    tests/model/test_v_pending.py."""
    job, lay = _job_layout(schedule)
    sh = shard(job, lay)
    per = per_layer(job.arch, sh)
    a = chunk_kept(job.arch, lay, per, range(0, 1))
    e = act.embedding_bytes(job.arch, sh)
    logits = logits_bytes(job.arch, job.arch.padded_vocab(1), sh)
    s0, s3, s1, s2 = 8 * a + e, 7 * a, 9 * a, 8 * a
    if schedule == "DualPipeV":
        want = (4 * s0 + s3 + logits, 3 * s1 + 2 * s2)
    else:
        want = (max(3 * s0 + s3, 4 * s0) + logits, max(2 * s1 + 2 * s2, 3 * s1 + s2))
    for rank, chunks in enumerate(lay.chunk_layers(32)):
        parts = activation_parts(job, lay, rank, chunks, sh, per)._replace(pending=())
        got = peak_bytes(job, lay, rank, sh, per, parts)
        assert got == pytest.approx(want[rank], rel=1e-12)


def test_the_peak_moves_to_rank_zero_and_never_reads_as_fitting() -> None:
    """With per-op selective recompute, Interleaved1F1B on the same stages peaks on rank 1 (the
    loss, 7 + 9 layers); ZBVZeroBubble on rank 0, whose weights hold 3 x (the output layer and
    final norm less one layer) bytes more than Interleaved1F1B's rank 0. At 7% headroom
    (74.1 GiB of 79.6) the V plan runs out on rank 0, by 0.6 GiB without the pending Ws'
    stash (`pending_w`) and by more with it."""
    looped = memory.estimate(*_job_layout("Interleaved1F1B", "selective"))
    job, lay = _job_layout("ZBVZeroBubble", "selective")
    v = memory.estimate(job, lay)
    assert (looped.worst.stage, v.worst.stage) == (1, 0)
    extra = v.stages[0].weights - looped.stages[0].weights
    assert extra == pytest.approx(3 * (EDGE + H - LAYER), rel=1e-12)
    tight = memory.estimate(job, lay, headroom_pct=7.0)
    assert not tight.fits
    # the search's fast path (the ranks that can hold the peak) finds the same peak
    assert memory.estimate(job, lay, 7.0, all_stages=False).peak == tight.peak


def test_a_v_layouts_peak_candidates_take_its_highest_rank_too() -> None:
    """pp 4: ranks 1 and 2 both hold a one-layer chunk 0 and a 13-layer chunk 1; in the V
    rank 1 holds 6 x 1 + 2 x 13 = 32 layers' activations, rank 2 5 x 1 + 3 x 13 = 44 and the
    peak: the lowest of ranks alike is not the one with the most in flight."""
    text = titan_pp2_vpp2("ZBVZeroBubble")
    split = '\npp = 4\npipeline_model_parallel_layout = "Et|t|t|t|t|t*13|t*13|tL"\n'
    text = text.replace("\npp = 2\n", split)
    text = text.replace("global_batch_size = 32", "global_batch_size = 16")
    plan = check_plan(parse_plan(tomllib.loads(text)))
    job, lay = plan.job, plan.require_layout()
    assert lay.v_stages and [len(c) for c in lay.chunk_layers(32)[1]] == [1, 13]
    assert [len(c) for c in lay.chunk_layers(32)[2]] == [1, 13]
    whole = memory.estimate(job, lay)
    assert whole.worst.stage == 2
    assert whole.stages[2].activations > whole.stages[1].activations
    assert memory.estimate(job, lay, all_stages=False).peak == whole.peak


def test_a_v_placement_under_another_schedule_is_refused() -> None:
    """The placement follows the schedule (`rules.torchtitan_shapes.placement`): a V layout
    under Interleaved1F1B, or a looped one under ZBVZeroBubble, is refused."""
    for schedule, v in (("Interleaved1F1B", True), ("ZBVZeroBubble", False)):
        job, lay = _job_layout(schedule)
        broken = [x.rule for x in violations(job, lay.with_(v_stages=v))]
        assert broken == ["tt_placement"]
