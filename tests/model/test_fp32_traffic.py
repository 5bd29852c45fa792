"""fp32 training's traffic (`planner.model.fp32.value_bytes`): what its collectives, sends and
elementwise kernels move is fp32, 4 bytes a value where bf16 training moves 2; its optimizer step
copies no master back where none is kept; its attention is Transformer Engine's unfused one
whatever flash_attention says; its MFU's second figure is against the TF32 peak.

Oracles, NVIDIA/Megatron-LM d98e8a64, by hand arithmetic:
- TP collectives and the expert all-to-alls allocate their outputs in the input's dtype
  (tensor_parallel/mappings.py:95, 145, 152, 185, 441-447): fp32 activations in fp32 training;
- pipeline sends and receives are config.pipeline_dtype (p2p_communication.py:340, 348), which
  is args.params_dtype (training/argument_utils.py:306): torch.float without --bf16 / --fp16;
- the distributed optimizer's parameter buffer is in the parameters' dtype
  (distributed/param_and_grad_buffer.py:921), Megatron-FSDP's model weight buffer in its
  parameter groups' dtype (megatron_fsdp/param_and_grad_buffer.py:1797-1798, 2631-2658);
- no fp32 master beside an fp32 parameter (FP32Optimizer, optimizer/__init__.py:683-686; the
  distributed optimizer's shard is a view, distrib_optimizer.py:466-475), so the copy back
  (:2886) copies a view onto itself, which PyTorch skips (pytorch 00f7c46a
  aten/src/ATen/native/Copy.cpp copy_impl, "Exit early if self and src are views of the same
  data");
- Transformer Engine runs fp32 attention in its unfused backend only (TransformerEngine a0b36d0c
  dot_product_attention/utils.py `get_attention_backend`, "Filter: Data type"), which the
  plan's flash_attention = false launches too (--attention-backend unfused).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs import catalog
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, cost, dispatch, dp_sync, layer_parts, layer_time, stage_sync
from planner.model.fine_offload import offloaded_bytes
from planner.model.performance import Performance, peak_label
from planner.model.shard import Shard

H = 4096  # Llama 3.1 8B's hidden size (and Mixtral 8x7B's)


def _llama(precision: str, seq: int = 1024, **kw: object) -> Job:
    fields: dict[str, object] = {"attention_dropout": False, "hidden_dropout": False, **kw}
    return job("llama3.1-8b", "h100-sxm-80gb", 8, seq, 64, precision=precision, **fields)


def _spy(monkeypatch: pytest.MonkeyPatch, module: object, *names: str) -> list[float]:
    """Record the byte counts `module`'s collectives named `names` are called with."""
    sizes: list[float] = []
    for name in names:
        real = getattr(module, name)

        def record(nbytes: float, *args: object, _real: object = real) -> float:
            sizes.append(nbytes)
            return _real(nbytes, *args)  # type: ignore[operator]

        monkeypatch.setattr(module, name, record)
    return sizes


@pytest.mark.parametrize(("precision", "word"), [("bf16", 2), ("fp32", 4)])
def test_a_tp_2_layer_gathers_fp32_activations(
    monkeypatch: pytest.MonkeyPatch, precision: str, word: int
) -> None:
    j = _llama(precision)
    lay = Layout(tp=2, dp=4, sequence_parallel=True, micro_batch_size=1)
    sizes = _spy(monkeypatch, comms, "reduce_scatter", "all_reduce")
    layer_time.layer_time(j, lay, layer_time.gpu_of(j), False)
    # the TP group's collectives over t x h values, t = 1 x 1024 tokens: 1024 x 4096 x 2 bytes
    # in bf16 (8,388,608), x 4 in fp32 (16,777,216); comms prices a gather as a reduce-scatter
    assert sizes and set(sizes) == {1024 * H * word}


@pytest.mark.parametrize(("precision", "word"), [("bf16", 2), ("fp32", 4)])
def test_a_pp_2_send_carries_fp32_values(
    monkeypatch: pytest.MonkeyPatch, precision: str, word: int
) -> None:
    j = _llama(precision)
    sizes = _spy(monkeypatch, comms, "p2p")
    cost.estimate(j, Layout(pp=2, dp=4, micro_batch_size=1))
    # one micro-batch's activations, 1 x 1024 tokens x h: 8,388,608 bytes bf16, 16,777,216 fp32
    assert sizes == [1024 * H * word]


@pytest.mark.parametrize("zero", [1, 3])
def test_the_parameter_all_gather_moves_fp32_weights(zero: int) -> None:
    lay = Layout(dp=8, zero_stage=zero)
    for precision, word in (("bf16", 2.0), ("fp32", 4.0)):
        j = _llama(precision)
        chunks = lay.chunk_layers(j.arch.num_layers)[0]
        assert stage_sync.gathered_param_bytes(j, lay, chunks, 1e9, 0.0) == (word, word)


def test_zero_3_gathers_its_units_in_the_bytes_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _llama("fp32").cluster
    lay = Layout(dp=8, zero_stage=3)
    groups = dp_sync.data_parallel_groups(cluster, lay)
    sizes = _spy(monkeypatch, dp_sync, "all_gather")
    dp_sync.data_parallel(groups, lay, 4e9, 0.0, 4.0, 1.0, 1.0, 1, 32, (4.0, 4.0))
    # 4e9 parameters in 32 units, 4 bytes each: 5e8 bytes a unit (was always 2 bytes, 2.5e8)
    assert sizes == [4e9 / 32 * 4]


def test_the_optimizer_step_copies_no_master_back_in_fp32() -> None:
    lay = Layout(dp=1, zero_stage=0)
    per_param = {}
    for precision in ("bf16", "fp32"):
        j = _llama(precision)
        gpu = layer_time.gpu_of(j)
        per_param[precision] = stage_sync.optimizer_time(j, lay, 1e9, 0.0, gpu) * gpu.hbm / 1e9
    # per parameter, fp32 main gradients (no gradient copy in either): the norm's read 4, the
    # buffer's zeroing 4, Adam's gradient read 4 and its 12 bytes (master or fp32 parameter, two
    # moments) read and written, 24; bf16 adds the master's copy to the 16-bit weight, 4 + 2
    assert per_param["bf16"] == pytest.approx(4 + 4 + 4 + 24 + 6)
    assert per_param["fp32"] == pytest.approx(4 + 4 + 4 + 24)
    # Megatron-FSDP keeps fp32 main weights beside fp32 parameters: its copy is 4 + 4
    j = _llama("fp32")
    fsdp = Layout(dp=1, zero_stage=3)
    assert stage_sync.param_copy_bytes(j, 3) == 8.0
    gpu = layer_time.gpu_of(j)
    assert stage_sync.optimizer_time(j, fsdp, 1e9, 0.0, gpu) * gpu.hbm / 1e9 == pytest.approx(44)


def test_the_expert_dispatch_and_combine_carry_fp32_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    moved = {}
    for precision in ("bf16", "fp32"):
        j = job("mixtral-8x7b", "h100-sxm-80gb", 8, 1024, 64, precision=precision)
        lay = Layout(dp=8, ep=8, micro_batch_size=1)
        with monkeypatch.context() as m:
            sizes = _spy(m, dispatch, "all_to_all")
            dispatch.layer_dispatch(j, lay, 1024.0, 1.0, 1, (), 2)
        moved[precision] = sizes
    # the dispatch and the combine: 1024 tokens x top-2 x h copies at an even load, 2 bytes a
    # value in bf16 (16,777,216), 4 in fp32 (33,554,432)
    assert moved["bf16"] == [1024 * 2 * H * 2] * 2
    assert moved["fp32"] == [1024 * 2 * H * 4] * 2


def test_the_elementwise_proxy_streams_fp32_values() -> None:
    kind = catalog.get_model("llama3.1-8b").kinds[0]
    lay = Layout(dp=8, micro_batch_size=1)
    # Llama 3.1 8B, T = 1024, no dropout: attention norm input + QKV input + Q, K, V + the
    # projection's input, T (h + h + (32 + 2 x 8) 128 + 32 x 128) = T x 18,432 values; the MLP's
    # norm input + fc1 input + fc1 output (2 x 14336) + fc2 input, T x 51,200 values
    values = 1024 * (18_432 + 51_200)
    masks = 2 * 1024 * H  # the two residual dropouts' 1-byte masks (the proxy counts them)
    scores = 4 * 32 * 1024 * 1024  # fp32's kept softmax output, streamed with the attention
    lse = 4 * 32 * 1024  # bf16's flash kernel keeps an fp32 log-sum-exp a head and token instead
    saved, streamed = layer_parts.activation_bytes(_llama("bf16"), lay, kind, 1.0)
    assert (saved, streamed) == (2 * values + masks + lse, 2 * values + masks + lse)
    saved, streamed = layer_parts.activation_bytes(_llama("fp32"), lay, kind, 1.0)
    assert (saved, streamed) == (4 * values + masks + scores, 4 * values + masks)
    # with attention dropout its mask and fp32 output (1 + 4 a score) stay in the proxy
    dropped = layer_parts.activation_bytes(_llama("fp32", attention_dropout=True), lay, kind, 1.0)
    assert dropped[1] == 4 * values + masks + 5 * 32 * 1024 * 1024


def test_fine_grained_offloading_moves_fp32_values() -> None:
    arch = catalog.get_model("llama3.1-8b")
    T = 8192
    # qkv_linear: the fused norm's input and the QKV GEMM's input, T x h each
    for word in (2.0, 4.0):
        sh = Shard(tokens=T, linear_bytes=word, value_bytes=word, flash_attention=word == 2.0)
        assert offloaded_bytes(arch, False, sh, frozenset({"qkv_linear"})) == 2 * word * T * H


def test_flash_attention_false_in_fp32_runs_the_same_unfused_attention() -> None:
    lay = Layout(dp=8, micro_batch_size=1)
    j = _llama("fp32", seq=4096)
    off = replace(j, flash_attention=False)  # launched as --attention-backend unfused
    a = layer_time.layer_time(j, lay, layer_time.gpu_of(j), False)
    b = layer_time.layer_time(off, lay, layer_time.gpu_of(off), False)
    # not the bf16 unfused path's batched GEMMs at the bf16 peak (about 30x faster)
    assert (b.fwd, b.bwd) == (a.fwd, a.bwd)


def test_fp32_mfu_is_labelled_against_the_tf32_peak() -> None:
    perf = cost.estimate(_llama("fp32"), Layout(dp=8, micro_batch_size=1))
    assert perf.peak_name == "TF32"
    # H100 SXM: TF32 494.5 of bf16 989 TFLOP/s dense
    assert perf.peak_over_bf16 == pytest.approx(0.5)
    assert perf.mfu_text().endswith(f"{perf.mfu:.1%} of the TF32 peak")
    assert peak_label("fp32", [False]) == "FP32"  # a GPU without TF32 tensor cores
    assert peak_label("fp8", [True]) == ""
    bf16 = cost.estimate(_llama("bf16"), Layout(dp=8, micro_batch_size=1))
    assert bf16.mfu_text() == f"MFU {bf16.mfu:.1%} of the bf16 peak"
    assert isinstance(bf16, Performance)


@pytest.mark.parametrize(("precision", "word"), [("bf16", 2), ("fp32", 4)])
def test_recompute_and_the_output_layer_move_fp32_values(precision: str, word: int) -> None:
    from planner.model import output_time, recompute_time

    j = _llama(precision, cross_entropy="gathered")
    lay = Layout(tp=2, dp=4, micro_batch_size=1)
    gpu = layer_time.gpu_of(j)
    p = recompute_time.Pieces(parts=(), times=(), casts=(), attn_fwd=0.0, tokens=1024, load=1.0)
    kind = catalog.get_model("llama3.1-8b").kinds[0]
    # Transformer Engine fuses a dense layer's norms into linear_qkv and linear_fc1 (Megatron-LM
    # d98e8a64 transformer_layer.py:475-479, :521-527 recompute no IdentityOp): none re-run; an
    # MoE layer's pre-MLP norm is its own module: one norm reading and writing 1024 x 4096
    # values, 2 x 1024 x 4096 x word bytes (`recompute_time.separate_norms`)
    from planner.inputs.hybrid import MOE

    assert recompute_time.module_time(j, lay, gpu, kind, p, "layernorm") == 0.0
    norms = recompute_time.module_time(j, lay, gpu, MOE, p, "layernorm")
    assert norms == pytest.approx(2 * 1024 * H * word / gpu.hbm, rel=1e-12)
    # gathered cross entropy all-gathers the 1024 x 128,256 logits over tp 2 in their dtype
    sizes: list[float] = []
    real = comms.all_gather
    try:
        comms.all_gather = lambda n, g: sizes.append(n) or real(n, g)  # type: ignore[assignment]
        output_time.output_layer_time(j, lay, gpu)
    finally:
        comms.all_gather = real  # type: ignore[assignment]
    assert sizes == [1024 * 128_256 * word]


def test_deepep_sizes_its_buffers_by_the_fp32_hidden_bytes() -> None:
    # Megatron-LM d98e8a64 fused_a2a.py:33 sizes DeepEP's buffer by hidden x max(element size,
    # 2) bytes: 4 h in fp32 training, 2 h in bf16. On 8 ranks (NVLink only) it holds, per
    # channel (2 SMs) and NVLink peer, its received tokens' hidden bytes: fp32 adds
    # sms / 2 x 8 x tokens x 2 h bytes
    from planner.model import buffers

    lay = Layout(dp=8, ep=8, moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="deepep")
    sizes = {}
    for p in ("bf16", "fp32"):
        j = job("mixtral-8x7b", "h100-sxm-80gb", 8, 4096, 64, precision=p)
        sizes[p] = buffers.dispatcher_bytes(j, lay)
    h = catalog.get_model("mixtral-8x7b").hidden_size
    tokens = buffers.DEEPEP_CONFIGS[8][0][1]  # NVLink receive chunk at 8 ranks: 256
    added = buffers.DEEPEP_NUM_SMS // 2 * 8 * tokens * 2 * h
    assert sizes["fp32"] - sizes["bf16"] == pytest.approx(added, rel=1e-12)
