"""What training on fp32 parameters keeps and runs that bf16 training does not: precision "fp32"
(a Megatron-LM line with neither --bf16 nor --fp16), and FP8 / NVFP4 GEMMs inside an fp32 model
(params_dtype "fp32": --fp8-format or --fp4-format beside neither), where only the quantised
GEMMs' operands differ (their linear layers keep the quantised copy of their input, and run at
the FP8 / FP4 peak); all below holds for both, keyed on `Job.params_dtype`. From
NVIDIA/Megatron-LM d98e8a64 unless said otherwise:

- weights: fp32 parameters (arguments.py:1194, params_dtype torch.float; no Float16Module,
  training.py:2468-2470 wraps only under --fp16 / --bf16), 4 bytes (`weight_bytes`);
- gradients: the buffers take the parameters' dtype (param_and_grad_buffer.py:924, with
  grad_reduce_in_fp32 off: validate_args turns it on under --bf16 only, arguments.py:1205-1217),
  fp32, and the optimizer reads them in place: FP32Optimizer sets param.grad = param.main_grad
  (optimizer.py:1309-1310, prepare_grads), the distributed optimizer `.float()`s the fp32 shard,
  which returns it (distrib_optimizer.py:2792), Megatron-FSDP `.to(param.dtype)` it the same
  way (megatron_fsdp/param_and_grad_buffer.py:3377-3381): no step copy
  (`rank_states.copies_main_grads`, fp32 buffers);
- optimizer: no fp32 master beside an fp32 parameter (`adam_bytes`): FP32Optimizer without the
  distributed optimizer (optimizer/__init__.py:683-686), and the distributed optimizer's shard of
  an fp32 parameter is a view of it (distrib_optimizer.py:466-475); but Megatron-FSDP allocates
  its main-weight buffer in megatron_fsdp_main_params_dtype, fp32 by default, whatever the
  parameters' dtype (megatron_fsdp/param_and_grad_buffer.py:2689-2706;
  distributed_data_parallel_config.py:188), and the precision-aware optimizer's Transformer
  Engine FusedAdam (master_weights=True, optimizer/__init__.py:581) initialises a master for
  every parameter (TransformerEngine 04912bf0 optimizers/fused_adam.py `initialize_state`);
- activations: every value a layer keeps in 4 bytes where bf16 keeps 2 (`word`; the linear
  layers' saved inputs too, `Shard.linear_bytes` 4, which is how a Shard says fp32); what bf16
  training keeps in fp32 already (the router's logits and probabilities, a loss's fp32 tensors)
  and the 1-byte dropout masks stay as they are;
- attention: Transformer Engine runs neither FlashAttention nor cuDNN attention on fp32 inputs
  (TransformerEngine a0b36d0c attention/dot_product_attention/utils.py `get_attention_backend`,
  "Filter: Data type"), so its unfused attention runs, and keeps the s x s scores
  (`SCORE_BYTES`); it has no context-parallel path (same function: "does not support context
  parallelism"), so fp32 with cp > 1 finds no backend;
- GEMMs: Transformer Engine's cuBLASLt GEMMs of fp32 operands compute in
  CUBLAS_COMPUTE_32F_FAST_TF32 ("Use TF32 only for pure FP32 GEMM",
  transformer_engine/common/gemm/cublaslt_gemm.cu `cublas_gemm`, TransformerEngine 5c62f728
  and its NVFP4-era successors): the TF32 peak (`GpuSpec.peak_flops("fp32")`, `gemm_peak`); the
  unfused attention's batched matmuls and Megatron's own output layer are torch.baddbmm / bmm /
  matmul, which take TF32 too where Megatron runs: torch.backends.cuda.matmul.allow_tf32
  defaults to False (PyTorch >= 1.12, docs/notes/cuda.rst "TensorFloat-32 (TF32) on Ampere
  (and later) devices") and Megatron sets no float32 matmul precision, but NVIDIA's PyTorch
  containers set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1, which turns it on (MONAI's documentation,
  docs.monai.io precision_accelerating: "the container includes a layer ENV
  TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1"), and Megatron-LM builds on them (d98e8a64
  docker/.ngc_version.dev, nvcr.io/nvidia/pytorch:26.06-py3). The functional test of FP8
  inside an fp32 model (moe/deepseek_proxy_fsdp_ep2_fsdp2, an fp32 output layer over a 50k
  vocabulary and unfused attention) agrees: on the CUDA cores' FP32 rate its step would be
  about half again as long as measured (benchmarks/functional_steps.py)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.gemm import Gpu
from planner.model.shard import BF16, FP32, MASK, Shard, norm_input

LINEAR_INPUT_BYTES = float(FP32)
"""What an fp32 linear layer keeps of its input per element (`Shard.linear_bytes`): the fp32
input itself."""

SCORE_BYTES = 4
"""Bytes per score Transformer Engine's unfused attention keeps in fp32: FusedScaleMaskSoftmax
takes its fused kernel only for 16-bit inputs (TransformerEngine c83f3857
attention/dot_product_attention/softmax.py `is_kernel_available`: "input must be fp16"), and its
torch softmax upcasts and casts back only 16-bit inputs (`forward_torch_softmax`), so it keeps
the fp32 softmax output, which the second batched GEMM saves as its input too."""

DROPOUT_SCORE_BYTES = MASK + FP32
"""Attention dropout's mask (1) and its fp32 output (4), where the model has attention dropout
(bf16: 1 + 2, `planner.model.scores.DROPOUT_BYTES_PER_SCORE`)."""

LOSS_BYTES_PER_LOGIT = 4
"""Bytes per local logit at the peak of Megatron's vocab-parallel cross entropy on fp32 logits
(tensor_parallel/cross_entropy.py): `.float()` returns the output layer's fp32 logits themselves
(:25), which become the saved softmax in place (:42, :61-62), and the gradient is written over it
(:88, :114) and handed to the fp32 output layer uncast: 4, against bf16's 2 + 4
(`loss_activations.MEGATRON_LOSS_BYTES_PER_LOGIT`)."""


def weight_bytes(job: Job) -> float:
    """Bytes of one unquantised parameter: 4 with fp32 parameters, 2 in bf16 / fp16 (the FP8 /
    NVFP4 GEMM weights: `buffers.quantised_weight_bytes`)."""
    return float(FP32) if job.params_dtype == "fp32" else float(BF16)


def value_bytes(job: Job) -> float:
    """Bytes of one value that a collective, a point-to-point send or an elementwise kernel
    moves where bf16 training moves a 16-bit one: 4 in fp32 training, 2 otherwise (the
    unquantised tensors of FP8 / NVFP4 runs too). Megatron-LM d98e8a64 moves each tensor in its
    own dtype, and with fp32 parameters the activations, their gradients and the parameters are
    fp32 (under FP8 / NVFP4 too: only the GEMMs' operands are quantised, the layers' outputs take
    the input's dtype): the
    tensor-parallel collectives and the expert all-to-alls allocate their outputs in the input's
    dtype (tensor_parallel/mappings.py:95, 145, 152, 185, 441-447); the pipeline's sends and
    receives are config.pipeline_dtype (p2p_communication.py:340, 348), which is params_dtype
    (training/argument_utils.py:306); the distributed optimizer's parameter buffer takes the
    parameters' dtype (distributed/param_and_grad_buffer.py:921), as Megatron-FSDP's model
    weight buffer does (megatron_fsdp/param_and_grad_buffer.py:1797-1798, its parameter
    groups' dtype, :2631-2658). The gradients' bytes are `Job.grad_bytes` (fp32 buffers, 4, in
    fp32 training: param_and_grad_buffer.py:924)."""
    return float(FP32) if job.params_dtype == "fp32" else float(BF16)


def gemm_peak(job: Job, gpu: Gpu) -> float:
    """Peak FLOP/s of a GEMM on unquantised operands in the parameters' dtype, at the job's
    clock: the bf16 peak for 16-bit parameters, the TF32 one (`GpuSpec.peak_flops("fp32")`)
    with fp32 ones (module docstring: Transformer Engine's and, in NVIDIA's containers, torch's).
    The router's logits (Transformer Engine's general_gemm, moe_utils.py:1389-1394), routed
    experts left unquantised beside quantised layers, the output layer (Megatron's own
    ColumnParallelLinear but with --fp8-output-proj, gpt_model.py:272-276: torch.matmul forward
    and backward, tensor_parallel/layers.py:459, :782) and the unfused attention's batched
    matmuls."""
    if job.params_dtype != "fp32":
        return gpu.peak_bf16
    spec = job.cluster.gpu
    return spec.peak_flops("fp32") * gpu.peak_bf16 / spec.peak_flops("bf16")


def keeps_master(job: Job, zero_stage: int) -> bool:
    """Whether the optimizer keeps an fp32 master weight beside each parameter (and so copies it
    back after the update): always beside 16-bit parameters and quantised ones (--fp8-param-gather
    / --fp4-param-gather: the distributed optimizer builds an fp32 main shard from a quantised
    parameter, distrib_optimizer.py:421-441; of one on fp32 parameters the source decides
    nothing, so the master is counted: the safe side); with fp32 parameters otherwise only under
    Megatron-FSDP (ZeRO 2 and 3 here) or the precision-aware optimizer (module docstring)."""
    if job.params_dtype != "fp32" or job.low_precision_params:
        return True
    return zero_stage >= 2 or job.precision_aware_optimizer


def adam_bytes(job: Job, zero_stage: int) -> float:
    """Optimizer bytes per parameter on the GPU (`Job.optimizer_bytes`), less the fp32 master in
    fp32 training where none is kept (`keeps_master`)."""
    return job.optimizer_bytes - (0.0 if keeps_master(job, zero_stage) else FP32)


def word(sh: Shard) -> float:
    """Bytes of one value a layer keeps that bf16 training keeps in 16 bits: 4 with fp32
    parameters, else 2 (bf16, fp16, and the unquantised tensors of FP8 / NVFP4 runs on 16-bit
    parameters): the Shard's `value_bytes`."""
    return sh.value_bytes


def widen(nbytes: float, sh: Shard) -> float:
    """`nbytes` counted in 16-bit values, in the values the Shard's training keeps (`word`)."""
    return nbytes * word(sh) / BF16


def norm_in(T: float, h: int, sh: Shard) -> float:
    """What one norm keeps of its input (`shard.norm_input`), the input in the Shard's values."""
    return norm_input(T, h, sh) + (word(sh) - BF16) * T * h


def score_bytes(heads: int, s: int, micro_batch: int, dropout: bool) -> float:
    """Bytes one layer's fp32 unfused attention keeps for `heads` heads of s x s scores per
    sample: SCORE_BYTES, and DROPOUT_SCORE_BYTES where the model has attention dropout."""
    per = SCORE_BYTES + (DROPOUT_SCORE_BYTES if dropout else 0)
    return per * heads * s * s * micro_batch


def pipeline_message_bytes(job: Job, layout: Layout) -> float:
    """Bytes of one pipeline send (a micro-batch's hidden states at a stage boundary, or their
    gradient): its tokens over cp, the hidden size, split by tp under sequence parallelism, in
    config.pipeline_dtype, the parameters' (`value_bytes`: fp32 in fp32 training)."""
    t = layout.micro_batch_size * job.seq_length / layout.cp
    tp = layout.tp if layout.sequence_parallel else 1
    return t * job.arch.hidden_size * value_bytes(job) / tp
