"""fp32 training (precision "fp32": a Megatron-LM line with neither --bf16 nor --fp16) in the
memory and time models (`planner.model.fp32`).

Oracles, NVIDIA/Megatron-LM d98e8a64 unless said otherwise, by hand arithmetic:
- states per parameter: fp32 weights (arguments.py:1194 params_dtype torch.float; no
  Float16Module, training.py:2468-2470), fp32 gradient buffers (param_and_grad_buffer.py:924,
  grad_reduce_in_fp32 off without --bf16), Adam's two fp32 moments and no master: FP32Optimizer
  (optimizer/__init__.py:683-686) sets param.grad = param.main_grad (optimizer.py:1309-1310); the
  distributed optimizer's shard of an fp32 parameter is a view (distrib_optimizer.py:466-475).
  So at ZeRO 1 over dp d: bf16 2 + 4 + (4 + 4 + 4) / d, fp32 4 + 4 + (4 + 4) / d. The
  precision-aware optimizer (TE FusedAdam, master_weights=True, optimizer/__init__.py:581;
  TransformerEngine 04912bf0 fused_adam.py initialize_state) and Megatron-FSDP (its fp32
  main-weight buffer, megatron_fsdp/param_and_grad_buffer.py:2689-2706) keep a master.
- activations: every 16-bit value 4 bytes, the unfused attention's fp32 softmax output 4 per
  score (TransformerEngine c83f3857 softmax.py: the fused kernel needs 16-bit inputs, the torch
  path casts only those); masks 1 byte, the router's fp32 tensors and probabilities 4.
- the loss: Megatron's vocab-parallel cross entropy works in place on the fp32 logits
  (tensor_parallel/cross_entropy.py:25, :42, :61-62, :88, :114): 4 bytes per logit.
- GEMMs: Transformer Engine's fp32 GEMMs run in TF32 (cublaslt_gemm.cu "Use TF32 only for pure
  FP32 GEMM"), whose dense peak on H100 SXM is 494.5 TFLOP/s, half the bf16 989
  (stas00/ml-engineering compute/accelerator/README.md @744d01e1, tf32 column).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs import catalog
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import activations as act
from planner.model import attention_time, layer_time, linear_time, rank_states
from planner.model import stage_activations as sa
from planner.model.gemm import fp32_peak
from planner.model.loss_activations import logits_bytes
from planner.model.moe_activations import moe_bytes
from planner.model.shard import Shard

PARAMS = 8_030_261_248
"""Llama 3.1 8B's parameters (untied embedding and output layer)."""


def _states(zero: int, **kw: object) -> tuple[float, ...]:
    j = job("llama3.1-8b", "h200-sxm-141gb", 8, 8192, 64, **kw)
    lay = Layout(dp=8, zero_stage=zero, recompute="full")
    chunks = lay.chunk_layers(j.arch.num_layers)[0]
    weights, grads, optimizer, cache, _ = rank_states.rank_state(j, lay, 0, chunks)
    copy = rank_states.step_grad_copy(j, lay, 0, chunks)
    return weights / PARAMS, grads / PARAMS, optimizer / PARAMS, cache, copy


@pytest.mark.parametrize(
    ("zero", "kw", "want"),
    [
        (1, {}, (2.0, 4.0, 12 / 8)),  # bf16, distributed optimizer: 2 + 4 + 12/8
        (1, {"precision": "fp32"}, (4.0, 4.0, 8 / 8)),  # fp32: 4 + 4 + 8/8, no master
        (0, {"precision": "fp32"}, (4.0, 4.0, 8.0)),  # FP32Optimizer: 4 + 4 + 8
        # the precision-aware optimizer's FusedAdam keeps a master: 4 + bf16 moments 2 + 2
        (1, {"precision": "fp32", "optimizer_state_dtype": "bf16"}, (4.0, 4.0, 8 / 8)),
        # its bf16 twin keeps the fp32 master of bf16 weights as an int16 remainder: 2 + 2 + 2
        # (TransformerEngine 04912bf0 fused_adam.py `_initialize_state`; adam_step)
        (1, {"optimizer_state_dtype": "bf16"}, (2.0, 4.0, 6 / 8)),
        (3, {"precision": "fp32"}, (4 / 8, 4 / 8, 12 / 8)),  # Megatron-FSDP's main weights
    ],
)
def test_states_per_parameter(zero: int, kw: dict[str, object], want: tuple[float, ...]) -> None:
    weights, grads, optimizer, cache, copy = _states(zero, **kw)
    assert (weights, grads, optimizer) == pytest.approx(want, rel=1e-9)
    # no FP8 weight copies (fp32 is not quantised); at ZeRO 3 the slot holds Megatron-FSDP's
    # parameters outside its units, gathered all step (planner/model/megatron_fsdp.py): the
    # embedding and output layer, 2 x 128,256 x 4,096, and the final norm's 4,096, in fp32
    assert cache == ((2 * 128_256 * 4_096 + 4_096) * 4.0 if zero == 3 else 0.0)
    assert copy == 0.0  # `.float()` of an fp32 gradient is the gradient: no step copy


def _shard(precision: str, **kw: object) -> tuple[Job, Shard]:
    j = job(
        "llama3.1-8b",
        "h100-sxm-80gb",
        8,
        1024,
        64,
        precision=precision,
        attention_dropout=False,
        hidden_dropout=False,
        **kw,
    )
    return j, sa.shard(j, Layout(dp=8, zero_stage=1))


def test_the_fp32_shard_keeps_fp32_inputs_and_the_scores() -> None:
    _, sh = _shard("fp32")
    assert sh.linear_bytes == 4.0 and not sh.quantised
    assert not sh.flash_attention  # TE has no flash or cuDNN kernel for fp32 inputs
    assert _shard("bf16")[1].flash_attention


def test_a_dense_layer_keeps_every_value_in_4_bytes() -> None:
    j, sh = _shard("fp32")
    # Llama 3.1 8B, T = 1024 tokens, h 4096, a 32, g 8, d 128, F 14336 gated; no dropout
    T, s = 1024, 1024
    attention = (
        4 * T * 4096  # the fused norm's input
        + 4 * T * 4096  # the QKV GEMM's input (the norm output)
        + 4 * T * (32 + 2 * 8) * 128  # Q, K, V
        + 4 * T * 32 * 128  # the output projection's input
        + 4 * 32 * s * s  # the fp32 softmax output, 4 per score
    )
    mlp = 4 * T * 4096 + 4 * T * 4096 + 4 * T * 14336 * 2 + 4 * T * 14336
    assert attention == 209_715_200 and mlp == 209_715_200
    assert act.layer_bytes(j.arch, False, sh) == attention + mlp
    # with dropout: a 1-byte mask per residual add, and 1 + 4 per score
    dropped = replace(sh, attention_dropout=True, hidden_dropout=True)
    masks = 2 * T * 4096
    scores = (1 + 4) * 32 * s * s
    assert act.layer_bytes(j.arch, False, dropped) == attention + mlp + masks + scores


def test_the_loss_keeps_4_bytes_a_logit() -> None:
    j, sh = _shard("fp32")
    vocab = j.arch.padded_vocab(1)
    T = 1024
    # the final norm's input and output, 4 bytes each; the logits become the softmax and then
    # the gradient in place: 4 a logit (bf16: 2 + 4, and 2 + 2 for the norm)
    assert logits_bytes(j.arch, vocab, sh) == 8 * T * 4096 + 4 * T * vocab
    jb, shb = _shard("bf16")
    assert logits_bytes(jb.arch, vocab, shb) == 4 * T * 4096 + 6 * T * vocab


def test_a_moe_layer_keeps_its_fp32_router_tensors_as_they_are() -> None:
    arch = catalog.get_model("mixtral-8x7b")  # h 4096, 8 experts, top-2, F 14336 gated
    T = 1024
    sh = Shard(
        tokens=T,
        linear_bytes=4.0,
        value_bytes=4.0,
        flash_attention=False,
        hidden_dropout=False,
        moe_load=1.0,
    )
    n = 2 * T  # token-expert pairs at an even load
    want = (
        4 * T * 4096  # the pre-MLP norm's input
        + 4 * T * 4096  # its output (the router's and the experts' input)
        + 2 * 4 * T * 8  # the router's fp32 logits and scores: as in bf16
        + n * 4 * 4096  # fc1's input
        + n * (4 * 14336 * 2 + 4)  # fc1's output (the fused SwiGLU's input), the probability
        + n * 4 * 14336  # fc2's input
    )
    assert moe_bytes(arch, sh) == want


def test_the_linear_gemms_run_at_the_tf32_peak() -> None:
    lay = Layout(tp=2, dp=4, zero_stage=1, sequence_parallel=True)
    kind = catalog.get_model("llama3.1-8b").kinds[0]
    times = {}
    for p in ("bf16", "fp32"):
        j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64, precision=p)
        gpu = layer_time.gpu_of(j)
        lin = linear_time.linear_times(j, lay, gpu, kind, 8192.0, 1.0)
        times[p] = lin.times
        assert sum(lin.casts) == 0.0  # no quantisation in either
    assert gpu.peak_linear == pytest.approx(494.5e12)  # the fp32 job's: H100's TF32 peak
    # half the peak on the same roofline (4-byte elements: the bytes per FLOP double with it)
    assert times["fp32"] == pytest.approx(tuple(2 * t for t in times["bf16"]), rel=1e-12)


def test_the_fp32_attention_runs_unfused_at_the_tf32_peak() -> None:
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64, precision="fp32")
    gpu = layer_time.gpu_of(j)
    core = attention_time.core_attention(j, gpu, 4096.0, 4096, 1, 1.0)
    scores = 4096 * 4096 * 32
    work = 2 * 2 * 4096 * 4096 * 32 * 128  # QK^T and PV over every score, forward
    # torch's batched matmuls in TF32 (NVIDIA's containers set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1:
    # planner.model.fp32): H100's 494.5 TFLOP/s, not the CUDA cores' 67
    peak = 494.5e12
    assert fp32_peak(j.cluster.gpu, gpu) == pytest.approx(67e12)  # what it is not timed at
    # at most that peak, plus the scores' HBM traffic (24 B forward, 36 back)
    assert core.fwd >= work / peak + 24 * scores / gpu.hbm
    assert core.bwd >= 2 * work / peak + 36 * scores / gpu.hbm
    # its GEMMs (the forward less the scores' traffic) faster than the CUDA cores could run them
    assert core.fwd - 24 * scores / gpu.hbm < work / fp32_peak(j.cluster.gpu, gpu)
    bf16 = attention_time.core_attention(
        job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64), gpu, 4096.0, 4096, 1, 1.0
    )
    assert core.fwd > 4 * bf16.fwd  # half bf16's 989 TFLOP/s, and no causal skipping


def test_fp32_is_not_quantised_and_pays_no_fp8_host_issue() -> None:
    # Job.quantised means FP8 / NVFP4 linear layers; fp32 runs none (it read `!= "bf16"`), so
    # its host issue per layer is bf16's, without FP8_ISSUE's quantisation kernels
    from planner.model import host

    lay = Layout(tp=2, dp=4, zero_stage=1, sequence_parallel=True)
    kind = catalog.get_model("llama3.1-8b").kinds[0]
    issue = {}
    for p in ("bf16", "fp32", "fp8"):
        j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64, precision=p)
        assert j.quantised == (p == "fp8")
        issue[p] = host.issue_units(j, lay, kind)
    assert issue["fp32"] == issue["bf16"] < issue["fp8"]
