"""Megatron's --defer-embedding-wgrad-compute (and --wgrad-deferral-limit): read from a command
line and from NeMo overrides, written back to a plan, emitted by launch, refused where Megatron
refuses it, what the last pipeline stage holds for it (planner.model.loss_activations
`deferred_wgrad_bytes`, stage_activations `deferred_calls`), and the step time: the output layer's
weight-gradient GEMMs moved from the last stage's backwards to the flush
(output_time `deferred_wgrad`), which shows what outlasts the cooldown (schedule `flush_exposed`).

Oracles: Megatron-LM d98e8a64 (tensor_parallel/layers.py: each output-layer call appends its input
to embedding_activation_buffer and, in its backward, its logits gradient to grad_output_buffer,
up to wgrad_deferral_limit calls, 0 = all; pipeline_parallel/schedules.py drains both at the
flush, after the cooldown; model_parallel_config.py refuses the deferral at pp 1 and a negative
limit; Transformer Engine's MXFP8 output projection refuses it), hand arithmetic on the bytes and
seconds, the frozen-weights output layer (no wgrad) as a second route, and Megatron-LM's
functional test gpt3_mcore_te_tp2_pp2_defer_embedding_wgrad_compute against its twin without the
flag (benchmarks/data/megatron_functional_tests/golden_values.json, A100).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from planner.cli import explain_notes
from planner.emit import megatron
from planner.emit.launch import render
from planner.inputs import megatron_args, plan_writer
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan, reframe
from planner.inputs.units import GIB
from planner.model import cost, memory
from planner.model.layer_time import gpu_of
from planner.model.output_time import deferred_wgrad, output_layer_time
from planner.model.schedule import flush_exposed
from planner.model.stage_activations import per_layer, shard, stage_activations
from planner.search.rules import violations

# the functional test's model and layout (its model_config.yaml), with the GPT-2 BPE vocabulary
# its vocab.json holds given as a size: 12 layers of 512, 8 heads, micro-batch 4 of 1,024 tokens,
# global batch 32, tp 2, pp 2; on 8 GPUs dp 2, so 32 / (4 x 2) = 4 micro-batches per step
LINE = (
    "--num-layers 12 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
    "--max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 32 "
    "--vocab-size 50257 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --bf16 "
    "--transformer-impl transformer_engine --defer-embedding-wgrad-compute "
    "--wgrad-deferral-limit 2"
)

# per deferred call, by hand: the output layer's input, 4 x 1,024 tokens x 512 in bf16 (no
# sequence parallelism: the whole sequence), and its logits gradient, 4,096 x 50,432 / 2 in bf16
# (50,257 padded to a multiple of 128 x tp = 256: 197 x 256 = 50,432)
PER_CALL = 4096 * 512 * 2 + 4096 * 25216 * 2


def _plan(line: str = LINE, gpus: int = 8):  # type: ignore[no-untyped-def]
    return parse_plan(megatron_args.to_plan(line, "a100-sxm-80gb", gpus))


def _acts(plan, rank: int, **change: object) -> float:  # type: ignore[no-untyped-def]
    job, lay = plan.job, plan.require_layout().with_(**change)
    sh = shard(job, lay)
    chunks = lay.chunk_layers(job.arch.num_layers)[rank]
    return stage_activations(job, lay, rank, chunks, sh, per_layer(job.arch, sh))


def test_the_flags_are_read_written_back_and_emitted() -> None:
    plan = _plan()
    lay = plan.require_layout()
    assert lay.defer_embedding_wgrad_compute and lay.wgrad_deferral_limit == 2
    assert violations(plan.job, lay) == []
    text = plan_writer.render(plan.job, lay, {"name": "gpt"}, ["t"])
    assert "defer_embedding_wgrad_compute = true" in text and "wgrad_deferral_limit = 2" in text
    args = [a for group in megatron.arguments(plan).parallel for a in group]
    assert "--defer-embedding-wgrad-compute" in args
    assert args[args.index("--wgrad-deferral-limit") + 1] == "2"
    # Megatron-Bridge's CommOverlapConfig (tests/data/megatron_bridge_config_schema.json): the
    # limit always, since Bridge leaves it at -1 unless given
    bridge = yaml.safe_load(render(plan, "megatron-bridge")[1])["comm_overlap"]
    assert bridge["defer_embedding_wgrad_compute"] is True and bridge["wgrad_deferral_limit"] == 2
    # without the flag: nothing read, written or emitted
    bare = _plan(LINE.replace(" --defer-embedding-wgrad-compute --wgrad-deferral-limit 2", ""))
    assert not bare.require_layout().defer_embedding_wgrad_compute
    assert "defer" not in plan_writer.render(bare.job, bare.require_layout(), {"name": "g"}, [])
    assert "--defer-embedding-wgrad-compute" not in [
        a for g in megatron.arguments(bare).parallel for a in g
    ]


def test_a_negative_limit_is_bad_input() -> None:
    with pytest.raises(InputError, match="--wgrad-deferral-limit: expected 0 or more"):
        _plan(LINE.replace("--wgrad-deferral-limit 2", "--wgrad-deferral-limit -1"))


def test_megatron_refuses_it_without_a_pipeline_or_with_the_mxfp8_output_layer() -> None:
    plan = _plan()
    job, lay = plan.job, plan.require_layout()
    flat = lay.with_(pp=1, dp=4)
    [bad] = violations(job, flat)
    assert bad.field == "parallel.defer_embedding_wgrad_compute"
    assert "pipeline_model_parallel_size > 1" in bad.message
    assert violations(job, flat.with_(defer_embedding_wgrad_compute=False)) == []
    mx = replace(job, precision="fp8", fp8_recipe="mxfp8", fp8_output_proj=True)
    assert any("MXFP8 output projection" in v.message for v in violations(mx, lay))
    # torchtitan's pipeline schedules run each weight gradient in its own backward
    titan = reframe(job, "torchtitan")
    assert any(v.field == "parallel.defer_embedding_wgrad_compute" for v in violations(titan, lay))


def test_the_last_stage_holds_the_deferred_calls() -> None:
    plan = _plan()
    off = {"defer_embedding_wgrad_compute": False}
    # limit 2 of 4 micro-batches: two calls' input and logits gradient on the last stage
    assert _acts(plan, 1) - _acts(plan, 1, **off) == pytest.approx(2 * PER_CALL)
    # the first stage holds no output layer
    assert _acts(plan, 0) == _acts(plan, 0, **off)
    # limit 0 (all) or above the step's calls: every micro-batch's but the last, whose own
    # tensors the loss's working set counts (3 of 4)
    for limit in (0, 22):
        held = _acts(plan, 1, wgrad_deferral_limit=limit) - _acts(plan, 1, **off)
        assert held == pytest.approx(3 * PER_CALL)
    # with sequence parallelism each call keeps the input's shard (512 of 1,024 tokens x 4)
    sp = _acts(plan, 1, sequence_parallel=True)
    sp_off = _acts(plan, 1, sequence_parallel=True, **off)
    assert sp - sp_off == pytest.approx(2 * (4096 * 512 * 2 / 2 + 4096 * 25216 * 2))


def test_the_functional_pair_measures_what_the_deferral_holds() -> None:
    # mem-max-allocated-bytes on A100 (dev): the deferral case 2,340,560,384, its twin without
    # the flags (gpt3_mcore_te_tp2_pp2_ddp_average_in_collective, which also averages in the
    # collective and turns gradient-accumulation fusion off, neither at the peak) 1,902,255,616
    measured = 2_340_560_384 - 1_902_255_616
    plan = _plan()
    held = _acts(plan, 1) - _acts(plan, 1, defer_embedding_wgrad_compute=False)
    assert held == pytest.approx(measured, rel=0.05)


def test_the_flush_shows_what_outlasts_the_cooldown_by_hand() -> None:
    # three stages' (forward, backward) per micro-batch; the last one's final backward ends, then
    # the other two run theirs: 2 + 3 = 5 s of cooldown, a chunk's (/ vpp) when interleaved
    stages = [(1.0, 2.0), (1.0, 3.0), (1.0, 4.0)]
    assert flush_exposed(7.0, stages) == pytest.approx(2.0)
    assert flush_exposed(4.0, stages) == 0.0
    assert flush_exposed(4.0, stages, vpp=2) == pytest.approx(1.5)
    assert flush_exposed(0.0, stages) == 0.0


def test_the_deferred_seconds_are_the_output_layers_wgrads() -> None:
    # one wgrad GEMM per call: what the output layer loses when the weights are frozen (no wgrad,
    # the same logits GEMM's dimensions), an independent route to the same seconds
    plan = _plan()
    job, lay = plan.job, plan.require_layout()
    gpu = gpu_of(job)
    one = output_layer_time(job, lay, gpu) - output_layer_time(
        replace(job, frozen_model=True), lay, gpu
    )
    assert one > 0
    # 4 micro-batches per step, one output-layer call each: limit 2 defers 2, 0 (all) and 22 all 4
    assert deferred_wgrad(job, lay, gpu, 4, 1) == pytest.approx(2 * one)
    for limit in (0, 22):
        assert deferred_wgrad(job, lay.with_(wgrad_deferral_limit=limit), gpu, 4, 1) == (
            pytest.approx(4 * one)
        )
    # two calls per micro-batch (an MTP depth's logits on the last stage), no limit: 8
    assert deferred_wgrad(job, lay.with_(wgrad_deferral_limit=0), gpu, 4, 2) == pytest.approx(
        8 * one
    )
    assert deferred_wgrad(job, lay.with_(defer_embedding_wgrad_compute=False), gpu, 4, 1) == 0.0
    assert deferred_wgrad(replace(job, frozen_model=True), lay, gpu, 4, 1) == 0.0


def test_the_step_moves_them_off_the_last_stage() -> None:
    plan = _plan()
    job, lay = plan.job, plan.require_layout()
    off = cost.estimate(job, lay.with_(defer_embedding_wgrad_compute=False))
    for limit in (2, 0):
        on_lay = lay.with_(wgrad_deferral_limit=limit)
        on = cost.estimate(job, on_lay)
        moved = deferred_wgrad(job, on_lay, gpu_of(job), 4, 1)
        # the last stage (the output layer's) is the slowest: its compute loses the moved GEMMs
        assert on.breakdown.compute == pytest.approx(off.breakdown.compute - moved)
        # its 6 layers' backward cover the flush on the first stage: nothing shows, and the
        # step gains at most what moved
        assert on.breakdown.bubble == pytest.approx(off.breakdown.bubble)
        assert off.step_time_s - moved <= on.step_time_s + 1e-12 < off.step_time_s


def test_explain_says_what_the_last_stage_holds() -> None:
    # the note's GiB is the last stage's total less the same plan's without the deferral
    plan = _plan()
    job, lay = plan.job, plan.require_layout()
    text = explain_notes.deferral_text(job, lay, cost.estimate(job, lay))
    assert text is not None and text.startswith("deferred output-layer weight gradients (limit 2)")
    held = memory.estimate(job, lay).stages[-1].total
    plain = memory.estimate(job, lay.with_(defer_embedding_wgrad_compute=False)).stages[-1].total
    assert f"{(held - plain) / GIB:.2f} GiB of its {held / GIB:.1f} GiB" in text
    flush = deferred_wgrad(job, lay, gpu_of(job), 4, 1)
    change = (
        cost.estimate(job, lay).step_time_s
        / cost.estimate(job, lay.with_(defer_embedding_wgrad_compute=False)).step_time_s
    )
    assert f"the flush runs their {flush * 1e3:.1f} ms of GEMMs per step, the step " in text
    assert f"{change - 1:+.1%} against the same plan without" in text and change < 1
    unlimited = lay.with_(wgrad_deferral_limit=0)
    assert "(limit every call)" in (
        explain_notes.deferral_text(job, unlimited, cost.estimate(job, unlimited)) or ""
    )
    plain_lay = lay.with_(defer_embedding_wgrad_compute=False)
    assert explain_notes.deferral_text(job, plain_lay, cost.estimate(job, plain_lay)) is None
