"""Checkpoint sizes by optimizer and ZeRO stage (planner.model.checkpoint_size).

Oracles: hand arithmetic on the source lines named.
- Llama 3.1 70B, 70,553,706,496 parameters. Megatron-LM d98e8a64 torch_dist, dp_reshardable
  (training/checkpointing.py:558): with TE's FusedAdam holding the master (the precision-aware
  optimizer), distrib_optimizer.py:1098-1109 saves `get_unscaled_state` of each state: bf16 m
  and v as fp32 (TE fused_adam.py:344-349), the master as its int16 remainder (:335-339;
  store_param_remainders True by default, optimizer_config.py:192): 2 + 2 + 4 + 4 = 12 B, with
  bf16 or fp32 moments alike, 846,644,477,952 B (planner said 10 and 14: 706 and 988 GB).
  Megatron-FSDP (ZeRO 3) saves its fp32 main weights (megatron_fsdp.py:1403,
  param_and_grad_buffer.py:3250-3261) and the optimizer's state (distrib_optimizer.py:1635-1657):
  4 + 8 = 12, not 14."""

from __future__ import annotations

from dataclasses import replace

from jobs import job

from planner.model.checkpoint_size import checkpoint_bytes_per_param
from planner.ops import resilience
from planner.ops.assumptions import OpsParams

P70 = 70_553_706_496
J70 = job("llama3.1-70b", "h100-sxm-80gb", 64, 8192, 128)


def test_precision_aware_checkpoint_is_twelve_bytes() -> None:
    bf16 = replace(J70, optimizer_state_dtype="bf16")
    pao = replace(J70, use_precision_aware_optimizer=True)
    for j in (bf16, pao):
        assert checkpoint_bytes_per_param(j, 1) == 12.0
        assert resilience.checkpoint_bytes(j, 1) == P70 * 12 == 846_644_477_952
    assert checkpoint_bytes_per_param(J70, 1) == 14.0  # Megatron-Core's own fp32 master


def test_megatron_fsdp_checkpoint_is_fp32_weights_and_state() -> None:
    assert checkpoint_bytes_per_param(J70, 3) == 12.0
    assert checkpoint_bytes_per_param(replace(J70, use_precision_aware_optimizer=True), 3) == 12.0
    r = resilience.resilience(J70, 10.0, OpsParams(), zero_stage=3)
    assert r.checkpoint_bytes == P70 * 12
