"""Megatron's precision-aware optimizer (`adam_step`): Transformer Engine's 16-bit master, the
fp32 working copies of its 16-bit states at the step, and the line's flags that say them.

Oracles:
- Megatron-LM d98e8a64: optimizer_config.py:407-414 (use_precision_aware_optimizer_no_fp8_or_ds_fp8,
  true with an fp16 master or without an FP8 recipe other than delayed), :192 and :437-438
  (store_param_remainders, True from TE 2.1); optimizer/__init__.py:576-588 (FusedAdam gets
  master_weights, use_decoupled_grad, master_weight_dtype = --main-params-dtype and
  store_param_remainders); distrib_optimizer.py:2783-2790 (the decoupled gradient is the
  16-bit buffer itself: no fp32 copy).
- TransformerEngine 04912bf0 transformer_engine/pytorch/optimizers/fused_adam.py: `__init__`
  keeps store_param_remainders only with an fp32 master; `_initialize_state` makes the master
  an int16 tensor for a bf16 parameter under it, else a tensor of master_weight_dtype (fp16:
  2 bytes); `step` unscales every non-fp32 state with `get_unscaled_state` (`.float()` of a
  bf16 / fp16 state, the int16 remainder passed as it is) for all of a group's parameters and
  frees them at the group's end ("del unscaled_lists").
- Hand arithmetic, Llama 3.1 8B on 8 H100, dp 8, ZeRO 1: the shard is 8,030,261,248 / 8 =
  1,003,782,656 parameters; 10 B each = 10,037,826,560 B = 9.348 GiB, 6 B = 5.609 GiB, 12 B
  (Adam's fp32 master and moments) = 11.218 GiB; the step's 4 B x k states x the shard x 1.10
  (the allocator's fragmentation) = 4.113 GiB per state (k = 1: 4.113, 2: 8.227, 3: 12.340).
"""

from __future__ import annotations

import tomllib

import pytest
from jobs import job

from planner.inputs import megatron_args, plan_writer
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, parse_plan
from planner.model import adam_step, memory

SHARD = 8_030_261_248 / 8
LAYOUT = Layout(dp=8, zero_stage=1, recompute="full")


def _llama(**kw: object) -> Job:
    return job("llama3.1-8b", "h100-sxm-80gb", 8, 2048, 128, **kw)


def _gib(x: float) -> float:
    return round(x / 2**30, 3)


@pytest.mark.parametrize(
    ("kw", "states", "step"),
    [
        # --main-params-dtype fp16, fp32 moments, bf16 gradients: 2 + 4 + 4; the master
        # unscaled, no gradient copy (it read 12 B and a 4 B copy: 11.218 / 4.113)
        ({"main_params_dtype": "fp16", "main_grad_dtype": "bf16"}, 9.348, 4.113),
        # fp16 master and bf16 moments: 2 + 2 + 2, three states unscaled (it read 7.479 / 0: an
        # 8.26 GiB under-count of the step)
        (
            {
                "main_params_dtype": "fp16",
                "optimizer_state_dtype": "bf16",
                "main_grad_dtype": "bf16",
            },
            5.609,
            12.340,
        ),
        # the remainder of the fp32 master and bf16 moments: 2 + 2 + 2, the moments unscaled
        ({"optimizer_state_dtype": "bf16", "main_grad_dtype": "bf16"}, 5.609, 8.227),
        # the flag alone, fp32 moments, bf16 gradients: 2 + 4 + 4, read in place, nothing at the
        # step (it read 12 B and a 4 B copy)
        ({"use_precision_aware_optimizer": True, "main_grad_dtype": "bf16"}, 9.348, 0.0),
        # fp16 master with fp32 gradient buffers (a_fp16.sh): the master unscaled only
        ({"main_params_dtype": "fp16"}, 9.348, 4.113),
    ],
)
def test_the_audit_table(kw: dict[str, object], states: float, step: float) -> None:
    st = memory.estimate(_llama(**kw), LAYOUT).stages[0]
    assert _gib(st.optimizer) == states
    assert _gib(st.grad_copy) == step


def test_the_unscaled_copies_by_hand() -> None:
    """fp16 master and bf16 moments: 4 B x 3 states x 1,003,782,656 = 12,045,391,872 B."""
    j = _llama(main_params_dtype="fp16", optimizer_state_dtype="bf16", main_grad_dtype="bf16")
    assert adam_step.unscaled_states(j, 1) == 3
    assert adam_step.unscaled_bytes(j, 1, (SHARD, 0.0)) == 12_045_391_872
    st = memory.estimate(j, LAYOUT).stages[0]
    assert st.grad_copy == pytest.approx(12_045_391_872 * memory.FRAGMENTATION)
    assert st.at_step


def test_megatron_fsdp_keeps_its_own_fp32_master() -> None:
    """Under Megatron-FSDP (ZeRO 2, 3) FusedAdam's master_weights is set False
    (optimizer/__init__.py:1147-1161): no 16-bit master and no remainder; its bf16 moments are
    still unscaled (2 states)."""
    j = _llama(optimizer_state_dtype="bf16", main_params_dtype="fp16")
    assert adam_step.master_saving(j, 3) == 0.0
    assert adam_step.unscaled_states(j, 3) == 2
    assert adam_step.master_saving(j, 1) == 2.0


def test_a_non_delayed_fp8_recipe_keeps_megatrons_master_and_copy() -> None:
    """FP8 tensorwise with bf16 moments and an fp32 master: not decoupled (optimizer_config.py
    :407-414), so Megatron keeps the fp32 master (4 B, no remainder) and `.float()`s the 16-bit
    gradients (4 B), while FusedAdam still unscales the bf16 moments (8 B): 12 B x the shard at
    the step."""
    j = _llama(
        precision="fp8",
        fp8_recipe="tensorwise",
        optimizer_state_dtype="bf16",
        main_grad_dtype="bf16",
    )
    assert adam_step.master_saving(j, 1) == 0.0
    st = memory.estimate(j, LAYOUT).stages[0]
    assert st.grad_copy == pytest.approx(12 * SHARD * memory.FRAGMENTATION)


LINE = (
    "torchrun --nproc-per-node 8 pretrain_gpt.py "
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --kv-channels 128 --seq-length 2048 "
    "--max-position-embeddings 8192 --position-embedding-type rope --normalization RMSNorm "
    "--swiglu --untie-embeddings-and-output-weights --disable-bias-linear "
    "--micro-batch-size 1 --global-batch-size 128 --bf16 --use-distributed-optimizer "
    "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 "
    "--vocab-size 128256 --tokenizer-type NullTokenizer --train-iters 10 --lr 1e-4 "
)
"""The audit's Llama 3.1 8B line (/tmp/s31/q1/a_plain.sh)."""


@pytest.mark.parametrize(
    ("extra", "fields"),
    [
        ("", {}),
        ("--use-precision-aware-optimizer", {"use_precision_aware_optimizer": True}),
        ("--use-precision-aware-optimizer --main-params-dtype fp16", {"main_params_dtype": "fp16"}),
        (
            "--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16",
            {"optimizer_state_dtype": "bf16"},
        ),
    ],
)
def test_the_line_says_it(extra: str, fields: dict[str, object]) -> None:
    reading = megatron_args.read(LINE + extra, "h100-sxm-80gb", None, "train.sh")
    training = reading.doc["training"]
    for name in ("use_precision_aware_optimizer", "main_params_dtype", "optimizer_state_dtype"):
        assert training.get(name) == fields.get(name)


def test_the_plan_round_trips() -> None:
    """plan_writer writes both fields and the plan reads them back to the same Job."""
    for kw in ({"main_params_dtype": "fp16"}, {"use_precision_aware_optimizer": True}):
        j = _llama(**kw)
        text = plan_writer.render(j, LAYOUT, {"name": "llama3.1-8b"}, ["test"])
        back = parse_plan(tomllib.loads(text)).job
        assert (back.main_params_dtype, back.use_precision_aware_optimizer) == (
            j.main_params_dtype,
            j.use_precision_aware_optimizer,
        )
        assert back.precision_aware_optimizer
