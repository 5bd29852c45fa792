"""What Megatron's CPU-offloaded optimizer leaves on the GPU beyond its GPU share, and the
gradient copy's bytes on the host link.

Oracles: Megatron-LM d98e8a64 megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py (:93
`fp32_param.grad = grad.to(fp32_param.dtype)` for the GPU share, never cleared by the outer
zero_grad :445-455; :106-113 the host gradient buffer in the fp32 clone's dtype; :274 only the
offloaded parameters cloned to the host), megatron_fsdp/param_and_grad_buffer.py:2689-2706 (the
fp32 main-weight buffer, allocated whatever the offload), PyTorch's Copy.cu (a non-blocking
copy converts on the GPU); hand arithmetic in the comments."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.model import memory, optimizer_offload

BASE = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64, use_precision_aware_optimizer=True)
GIB = 2**30


def _optimizer(zero: int, fraction: float, grads: str) -> float:
    j = replace(BASE, optimizer_offload_fraction=fraction, main_grad_dtype=grads)
    return memory.estimate(j, Layout(dp=8, zero_stage=zero)).stages[0].optimizer


@pytest.mark.parametrize("grads", ["fp32", "bf16"])
def test_megatron_fsdp_keeps_the_offloaded_shares_main_weights(grads: str) -> None:
    # ZeRO 2, all offloaded: the optimizer holds views of the fp32 main-weight shard, which
    # stays allocated: 4 bytes x 8.03e9 / 8 = 4.015e9 bytes (3.74 GiB), where it counted none
    params = 8.030261248e9 / 8
    assert _optimizer(2, 1.0, grads) == pytest.approx(4 * params, rel=1e-3)


def test_a_partial_offload_keeps_the_gpu_shares_fp32_gradients() -> None:
    # ZeRO 1, half offloaded, bf16 gradient buffers: the GPU half's fp32 clones keep their cast
    # fp32 gradients between steps: 4 x 0.5 x 1.0038e9 = 2.01e9 bytes beyond the half's 12 bytes
    params = 8.030261248e9 / 8
    fp32_grads, bf16_grads = _optimizer(1, 0.5, "fp32"), _optimizer(1, 0.5, "bf16")
    assert fp32_grads == pytest.approx(0.5 * 12 * params, rel=1e-3)
    assert bf16_grads - fp32_grads == pytest.approx(4 * 0.5 * params, rel=1e-3)


def test_the_gradients_cross_the_link_in_fp32() -> None:
    # bf16 buffers still send 4 bytes a parameter: 1e9 x 4 / 25.6e9 = 0.156 s (H100: PCIe 5.0
    # x16 shared by two GPUs, 64 / 2 x 0.8), then AdamW 28e9 / 57.6e9 and the masters back 4e9
    j = replace(BASE, optimizer_offload_fraction=1.0, main_grad_dtype="bf16")
    total = optimizer_offload.host_step_time(j, 1e9, overlap=False)
    assert total == pytest.approx(4e9 / 25.6e9 + 28e9 / 57.6e9 + 4e9 / 25.6e9)
