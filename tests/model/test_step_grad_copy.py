"""The optimizer step's fp32 copies of 16-bit gradients (`rank_states.step_grad_copy`), held
after the activations are freed: a stage's peak is the larger of the two (`StageMemory.total`).

Oracles (Megatron-LM d98e8a64):
- optimizer.py:1093-1096, Float16OptimizerWithFloat16Params._copy_model_grads_to_main_grads:
  `main_param.grad = model_param.main_grad.float()` for every parameter (ZeRO 0);
  distrib_optimizer.py:2792 `shard_main_param.grad = shard_model_grad.float()` on the shard's
  range (ZeRO 1); `.float()` of an fp32 buffer is the buffer itself (no copy).
- distrib_optimizer.py:2783-2790 with optimizer_config.py:407-414: the precision-aware
  optimizer reads the buffer in place (`.decoupled_grad`) unless an FP8 recipe other than
  delayed scaling runs (and the optimizer is not offloaded).
- training.py:3044: `optimizer.zero_grad()` (set_to_none) at the next step's start frees them,
  before any forward: they never coexist with activations.
- megatron_fsdp/param_and_grad_buffer.py:3377-3381: Megatron-FSDP casts the gradient shard to
  the main weights' fp32 (`optimizer_grad.to(param.dtype)`) unless it is decoupled
  (--use-precision-aware-optimizer, training.py:2650).
- Hand arithmetic: Llama 3.1 8B has 8,030,261,248 parameters; 4 B each is 32.12e9 B =
  29.92 GiB at ZeRO 0, and 1/8 of it at ZeRO 1 over dp 8; the allocator's FRAGMENTATION (1.10)
  on top, as on the activations the copies reuse.
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.model import memory, rank_states

PARAMS = 8_030_261_248
"""Llama 3.1 8B's parameters (untied embedding and output layer)."""


def _copy(zero: int, **kw: object) -> float:
    j = job("llama3.1-8b", "h200-sxm-141gb", 8, 8192, 64, **kw)
    lay = Layout(dp=8, zero_stage=zero, recompute="full")
    chunks = lay.chunk_layers(j.arch.num_layers)[0]
    return rank_states.step_grad_copy(j, lay, 0, chunks)


def test_zero0_copies_every_parameter_and_zero1_its_shard() -> None:
    assert _copy(0, main_grad_dtype="bf16") == pytest.approx(4.0 * PARAMS)
    assert _copy(1, main_grad_dtype="bf16") == pytest.approx(4.0 * PARAMS / 8)


@pytest.mark.parametrize(
    ("kw", "copies"),
    [
        ({"main_grad_dtype": "fp32"}, False),  # `.float()` returns the fp32 buffer
        ({"main_grad_dtype": "bf16", "optimizer_state_dtype": "bf16"}, False),  # decoupled
        (
            {
                "main_grad_dtype": "bf16",
                "optimizer_state_dtype": "bf16",
                "precision": "fp8",
                "fp8_recipe": "tensorwise",
            },
            True,  # precision-aware, but an FP8 recipe other than delayed: `.float()` again
        ),
        (
            {
                "main_grad_dtype": "bf16",
                "optimizer_state_dtype": "bf16",
                "precision": "fp8",
                "fp8_recipe": "delayed",
            },
            False,
        ),
    ],
)
def test_which_runs_copy(kw: dict[str, object], copies: bool) -> None:
    assert (_copy(0, **kw) > 0) is copies


def test_megatron_fsdp_copies_its_gradient_shard_unless_decoupled() -> None:
    """Megatron-FSDP (ZeRO 2, 3) casts each gradient shard to the fp32 main weights' dtype at
    the step (megatron_fsdp/param_and_grad_buffer.py:3377-3381, "a persistent casted-copy",
    :3200-3204): 4 B x the shard, 1/8 of the parameters over dp 8 (QA: it was counted in the
    step's time and left out of its memory); the precision-aware optimizer's decoupled gradient
    (training.py:2650) makes none, whatever the FP8 recipe."""
    for zero in (2, 3):
        assert _copy(zero, main_grad_dtype="bf16") == pytest.approx(4.0 * PARAMS / 8)
        assert _copy(zero, main_grad_dtype="fp32") == 0.0
        aware = {"main_grad_dtype": "bf16", "optimizer_state_dtype": "bf16"}
        assert _copy(zero, **aware, precision="fp8", fp8_recipe="tensorwise") == 0.0


def test_the_peak_holds_the_larger_of_activations_and_the_copies() -> None:
    """ZeRO 0 with 16-bit gradients on 8 H200 (full recompute: 8.8 GiB of activations): the
    step's 29.92 GiB of copies (x 1.10) decide the peak, which is the states, the buffers and the
    copies, and the stage says it peaks at the step. At ZeRO 1 the copies (3.74 GiB x 1.10) are
    below the activations and the peak is what it was without them."""
    j = job("llama3.1-8b", "h200-sxm-141gb", 8, 8192, 64, main_grad_dtype="bf16")
    z0 = memory.estimate(j, Layout(dp=8, zero_stage=0, recompute="full")).stages[0]
    assert z0.grad_copy == pytest.approx(4.0 * PARAMS * memory.FRAGMENTATION)
    assert z0.grad_copy / 2**30 == pytest.approx(32.91, abs=0.01)
    assert z0.at_step
    assert z0.total == pytest.approx(z0.weights + z0.grads + z0.optimizer + z0.grad_copy + z0.other)
    # 15.0 + 15.0 + 89.7 + 32.9 + 1.5: over H200's 136.2 usable GiB (it read 130.0 and "fits"
    # when the copies were left out)
    assert z0.total / 2**30 == pytest.approx(154.0, abs=0.1)
    z1 = memory.estimate(j, Layout(dp=8, zero_stage=1, recompute="full")).stages[0]
    assert not z1.at_step and 0 < z1.grad_copy < z1.activations
    assert z1.total == pytest.approx(
        z1.weights + z1.grads + z1.optimizer + z1.activations + z1.other
    )


def test_the_copies_fragmentation_is_reserved_not_allocated() -> None:
    """The allocator reserves FRAGMENTATION - 1 (0.10) on top of what the phase at the peak
    holds: at ZeRO 0 (no transient buffers) the step's copies in place of the activations, so
    the unallocated bytes grow by 0.10 x (copies - activations) over the same layout with fp32
    buffers, whose step copies nothing."""
    lay = Layout(dp=8, zero_stage=0, recompute="full")
    g16 = job("llama3.1-8b", "h200-sxm-141gb", 8, 8192, 64, main_grad_dtype="bf16")
    g32 = job("llama3.1-8b", "h200-sxm-141gb", 8, 8192, 64, main_grad_dtype="fp32")
    st16, st32 = (memory.estimate(j, lay).stages[0] for j in (g16, g32))
    assert st32.grad_copy == 0.0 and not st32.at_step
    frag = memory.FRAGMENTATION
    acts = st32.activations / frag
    assert st16.activations == pytest.approx(st32.activations)
    grown = st16.unallocated - st32.unallocated
    assert grown == pytest.approx((4.0 * PARAMS - acts) * (frag - 1))
