"""Megatron-LM's --use-torch-fsdp2 priced as PyTorch FSDP2, not Megatron-FSDP.

Oracles (NVIDIA/Megatron-LM d98e8a64): megatron/core/distributed/
torch_fully_sharded_data_parallel.py:60-65 and :127-148 call fully_shard on every
TransformerLayer, the LanguageModelEmbedding and the output ColumnParallelLinear, then the root,
with reshard_after_forward from training.py:2627-2629 (False under
--torch-fsdp2-no-reshard-after-forward, arguments.py:3218) and no mp_policy (:82-85), on a model
Float16Module made bf16 (training.py:2468-2470); data_parallel_base.py:24-32: no_sync does
nothing, so every micro-batch reduce-scatters. arguments.py:1031-1047: pp 1, ep 1, no
distributed optimizer, untied embeddings, no fp16.

Hand arithmetic, Llama 3.1 8B untied on 8 H100, tp 1, dp 8 (N = 8): P = 8,030,261,248
parameters; a decoder layer L = 2 x 4,096^2 (q, o) + 2 x 4,096 x 1,024 (k, v) + 3 x 4,096 x 14,336
(gate, up, down) + 2 x 4,096 (norms) = 218,112,000; the output layer's unit, its
ColumnParallelLinear (the final norm is the root's), W = 128,256 x 4,096 = 525,336,576. States:
bf16 weights and gradients 2 P / 8 each, Float16Optimizer's fp32 master and two fp32 moments
12 P / 8.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.emit import bridge, megatron
from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan, parse_plan
from planner.inputs.plan_writer import parallel_table
from planner.model import comms, cost, fsdp2, memory, rank_sync
from planner.model.rank_states import fsdp_profile, fsdp_step, rank_state
from planner.search import rules

LINE = (
    "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
    "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
    "--num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 "
    "--position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear "
    "--untie-embeddings-and-output-weights --vocab-size 128256 --tokenizer-type NullTokenizer "
    "--micro-batch-size 1 --global-batch-size 32 --use-torch-fsdp2 --bf16 "
    "--no-gradient-accumulation-fusion --ckpt-format torch_dist --lr 1e-4 "
)
KEEP = "--torch-fsdp2-no-reshard-after-forward "
P, L, W = 8_030_261_248, 218_112_000, 525_336_576


def _plan(extra: str = "") -> Plan:
    return parse_plan(megatron_args.to_plan(LINE + extra, "h100-sxm-80gb", 8))


def _state(plan: Plan) -> tuple[float, ...]:
    job, lay = plan.job, plan.require_layout()
    chunks = lay.chunk_layers(job.arch.num_layers)[0]
    return (*rank_state(job, lay, 0, chunks), fsdp_step(job, lay, 0, chunks))


def test_the_line_reads_as_torch_fsdp2_with_its_resharding() -> None:
    for extra, reshard in (("", True), (KEEP, False)):
        lay = _plan(extra).require_layout()
        assert (lay.use_torch_fsdp2, lay.torch_fsdp2_reshard_after_forward) == (True, reshard)
        assert lay.zero_stage == 3


def test_states_are_zero_3s_bf16_shards_and_float16_optimizer() -> None:
    weights, grads, optimizer, cache, _, _ = _state(_plan())
    assert (weights, grads, optimizer, cache) == (2 * P / 8, 2 * P / 8, 12 * P / 8, 0.0)


def test_resharding_transient_is_two_layers_and_the_output_layer_at_the_loss() -> None:
    """At the loss's backward: the output layer gathered again (resharded after its forward),
    its bf16 gradient and bf16 reduce-scatter input, 6 W, beside the last layer prefetched,
    2 L = 3,588,243,456; a layer's backward holds two layers gathered and one layer's gradient
    and the previous one's reduce-scatter input, 8 L = 1,744,896,000, less. Nothing at the step
    (every unit resharded after its backward)."""
    plan = _plan()
    *_, transient, at_step = _state(plan)
    assert transient == 6 * W + 2 * L == 3_588_243_456
    assert at_step == 0.0
    job, lay = plan.job, plan.require_layout()
    assert fsdp_profile(job, lay, 0, lay.chunk_layers(32)[0]) == ()


def test_without_resharding_every_unit_stays_gathered_to_its_backward() -> None:
    """2 P of gathered parameters at the loss, beside the output layer's gradient and input
    4 W: 16,060,522,496 + 2,101,346,304."""
    *_, transient, at_step = _state(_plan(KEEP))
    assert transient == 2 * P + 4 * W == 18_161_868_800
    assert at_step == 0.0


def test_the_peak_counts_the_transient_whole() -> None:
    """The two readings differ by their transients (2 P + 4 W - 6 W - 2 L), scaled alike."""
    peaks = [memory.estimate(p.job, p.require_layout()).peak for p in (_plan(), _plan(KEEP))]
    assert peaks[1] > peaks[0] + 0.9 * (2 * P - 2 * W - 2 * L) / 2**30


def test_dp_time_gathers_and_reduce_scatters_bf16_every_micro_batch() -> None:
    """Per micro-batch (m = 32 / 8 = 4) and decoder layer (32 units of P / 32 parameters): a
    bf16 all-gather in the forward and, resharded, again in the backward, and a bf16
    reduce-scatter; without resharding no backward gather. With no compute to hide under every
    collective shows: m x 32 x (2 ag + rs) and m x 32 x (ag + rs). The step's cost takes this
    traffic (rank_sync), less without resharding."""
    plan, kept = _plan(), _plan(KEEP)
    job, lay = plan.job, plan.require_layout()
    group = comms.place(job.cluster, 1, 8)
    ag = comms.all_gather(P / 32 * 2, group)
    rs = comms.reduce_scatter(P / 32 * 2, group)
    for p, per_unit in ((plan, 2 * ag + rs), (kept, ag + rs)):
        shown = fsdp2.data_parallel_time(p.job, p.require_layout(), P, 0.0, 0.0, 0.0, 4, 32)
        assert shown[0] == pytest.approx(4 * 32 * per_unit, rel=1e-9)
        assert shown[1] == 0.0

    def total(p: Plan) -> float:
        b = cost.estimate(p.job, p.require_layout()).breakdown
        return b.dp_comm_exposed + b.dp_comm_hidden

    assert rank_sync.fsdp2_sync(job, lay)
    assert total(kept) < total(plan)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"pp": 2, "dp": 4}, "parallel.use_torch_fsdp2"),
        ({"zero_stage": 1}, "parallel.use_torch_fsdp2"),
        ({"fsdp_double_buffer": True}, "parallel.use_torch_fsdp2"),
        ({"use_torch_fsdp2": False}, "parallel.torch_fsdp2_reshard_after_forward"),
    ],
)
def test_what_megatron_refuses_is_a_violation_naming_the_field(
    change: dict[str, object], field: str
) -> None:
    plan = _plan(KEEP)
    job, lay = plan.job, plan.require_layout()
    assert not rules.violations(job, lay)
    broken = rules.violations(job, lay.with_(**change))
    assert [v.field for v in broken if v.rule == "torch_fsdp2"] == [field]


def test_a_plan_file_keeps_it_and_exits_2_where_refused(tmp_path: object) -> None:
    plan = _plan(KEEP)
    table = parallel_table(plan.job, plan.require_layout())
    assert table["use_torch_fsdp2"] is True and table["torch_fsdp2_reshard_after_forward"] is False
    with pytest.raises(InputError, match=r"parallel\.use_torch_fsdp2: true, but zero_stage 1"):
        rules.check_plan(Plan(plan.job, plan.require_layout().with_(zero_stage=1)))


def test_the_megatron_target_writes_torch_fsdp2_back() -> None:
    for extra in ("", KEEP):
        plan = _plan(extra)
        text = megatron.render(plan, "job")
        assert "--use-torch-fsdp2" in text and "--no-gradient-accumulation-fusion" in text
        assert "--use-megatron-fsdp" not in text
        # validate_args asserts --overlap-param-gather with the distributed optimizer or
        # Megatron-FSDP only (arguments.py:1025-1027)
        assert "--overlap-param-gather" not in text
        assert ("--torch-fsdp2-no-reshard-after-forward" in text) == bool(extra)
        back = parse_plan(megatron_args.to_plan(text, "h100-sxm-80gb", 8))
        assert back.require_layout() == plan.require_layout()


def test_the_bridge_target_sets_dist_use_torch_fsdp2() -> None:
    """Megatron-Bridge 067f987d: DistributedInitConfig.use_torch_fsdp2 (training/config.py
    :1481-1482); its ddp config has no reshard_after_forward, so FSDP2 reshards
    (torch_fully_sharded_data_parallel.py:84 reads it with getattr(..., True))."""
    out = bridge.sections(_plan())
    assert out["dist"] == {"use_torch_fsdp2": True}
    assert out["ddp"]["use_megatron_fsdp"] is False
    assert out["ddp"]["use_distributed_optimizer"] is False
    assert out["optimizer"]["use_distributed_optimizer"] is False
    assert out["model"]["gradient_accumulation_fusion"] is False
    assert "checkpoint" not in out  # torch_dist, Bridge's default (not fsdp_dtensor)
    with pytest.raises(InputError, match=r"parallel\.torch_fsdp2_reshard_after_forward"):
        bridge.sections(_plan(KEEP))


def test_megatron_fsdps_gradient_comm_dtype_is_refused_beside_it() -> None:
    # --megatron-fsdp-grad-comm-dtype is read by Megatron-FSDP's buffers only (its
    # DistributedDataParallelConfig field, pgb:3107-3111); torch FSDP2 is given
    # reshard_after_forward alone (training.py:2627-2629)
    plan = _plan(KEEP)
    job, lay = plan.job, plan.require_layout()
    broken = rules.violations(replace(job, fsdp_grad_comm_dtype="fp32"), lay)
    assert [v.field for v in broken if v.rule == "torch_fsdp2"] == ["parallel.use_torch_fsdp2"]


def test_fp8_param_gather_is_refused_beside_it() -> None:
    # Megatron-LM d98e8a64 arguments.py:1051-1057 sets fp8_param_gather False under torch FSDP2
    # with Transformer Engine 2.0 or later (bf16 all-gathers): a plan keeping it (the plan's
    # default under fp8) would be priced with FP8 parameters Megatron does not keep; the line
    # reader drops it with a note instead
    plan = _plan(KEEP)
    job, lay = plan.job, plan.require_layout()
    fp8 = replace(job, precision="fp8", fp8_param_gather=True)
    broken = rules.violations(fp8, lay)
    assert [v.field for v in broken if v.rule == "torch_fsdp2"] == ["parallel.use_torch_fsdp2"]
    kept = rules.violations(replace(fp8, fp8_param_gather=False), lay)
    assert not [v for v in kept if v.rule == "torch_fsdp2"]


@pytest.mark.parametrize("optimizer", ["lion", "adaptive_muon"])
def test_an_emerging_optimizer_beside_fsdp_exits_2(optimizer: str) -> None:
    # Megatron-LM d98e8a64 arguments.py:1726-1740: any --optimizer but sgd and adam asserts not
    # --use-torch-fsdp2 (:1739) and not --use-megatron-fsdp (:1740); planner reads lion and
    # adaptive_muon as Adam with a note, so the refusal is the reader's
    with pytest.raises(InputError, match=f"--optimizer: {optimizer}: .*--use-torch-fsdp2"):
        _plan(f"--optimizer {optimizer} ")
    mfsdp = LINE.replace("--use-torch-fsdp2", "--use-megatron-fsdp --use-distributed-optimizer")
    mfsdp = mfsdp.replace("--ckpt-format torch_dist", "--ckpt-format fsdp_dtensor")
    with pytest.raises(InputError, match=f"--optimizer: {optimizer}: .*--use-megatron-fsdp"):
        megatron_args.to_plan(mfsdp + f"--optimizer {optimizer} ", "h100-sxm-80gb", 8)
    assert parse_plan(megatron_args.to_plan(mfsdp, "h100-sxm-80gb", 8)).job.optimizer == "adam"
