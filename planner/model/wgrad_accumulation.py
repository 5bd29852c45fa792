"""The weight gradients' way into the main gradients without gradient-accumulation fusion, in
Megatron-LM (d98e8a64).

With fusion (Megatron's default: --no-gradient-accumulation-fusion is a store_false of
gradient_accumulation_fusion, arguments.py:2944-2948) Transformer Engine's linear layers
accumulate each weight gradient into the parameter's main gradient inside the wgrad GEMM
(`fuse_wgrad_accumulation=config.gradient_accumulation_fusion`: TE linears
extensions/transformer_engine.py:1293, :1524, the experts' TEGroupedLinear :2527, the fused
grouped MLP :3247, :3267) and so does Megatron's own ColumnParallelLinear, the output layer
(tensor_parallel/layers.py:657, :713-762). Without it the GEMM writes a .grad in the parameters'
dtype and DDP's backward hook, registered for every parameter that requires a gradient, adds it
to the main gradient (distributed_data_parallel.py:575-578 `param.main_grad.add_(param.grad.data)`):
one memory-bound pass per weight and micro-batch that reads the gradient and the main gradient
and writes the main gradient. Under Megatron-FSDP's sharded gradients (ZeRO 2 and 3) the hook
copies instead (megatron_fsdp.py:650-660 `param.main_grad.copy_`): read the gradient, write the
main gradient. The parameters that never fuse (the word and position embeddings, whose dense
backward is `embedding_grads.backward_time`'s) go through the hook either way; the norms, biases
and routers, which do too, are counted in with the rest of the rank's parameters (a few
thousandths of them). torch FSDP2 has no main gradient (its reduce-scatter reads .grad:
distributed/torch_fully_sharded_data_parallel.py), and the reader keeps fusion on for it
(`planner.inputs.megatron_training`); torchtitan has no such hook.

Timed at the GPU's achieved HBM bandwidth (`Gpu.hbm`, the streaming efficiency of
`layer_time.HBM_EFFICIENCY`), every micro-batch, on each pipeline rank for the parameters it
holds (`stage_params`). The .grad of one weight lives only until its hook runs: not counted.
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import params
from planner.model.fp32 import value_bytes
from planner.model.gemm import Gpu
from planner.model.schedule import Chunks
from planner.model.stage_params import stage_params


def bytes_per_param(job: Job, lay: Layout) -> float:
    """HBM bytes the hook moves per unfused weight element and micro-batch: the gradient read
    (`fp32.value_bytes`), the main gradient written (`Job.grad_bytes`), and read too where it
    adds (all but Megatron-FSDP's sharded gradients, which copy). bf16 with fp32 main
    gradients: 2 + 4 + 4 = 10 bytes (DDP), 2 + 4 = 6 (Megatron-FSDP ZeRO 2/3)."""
    copies = lay.zero_stage >= 2
    return value_bytes(job) + (1 if copies else 2) * job.grad_bytes


def unfused_params(job: Job, lay: Layout, rank: int, chunks: Chunks) -> float:
    """Parameters of pipeline rank `rank` (on one GPU) whose weight gradient the fusion would
    have accumulated: all it holds (`stage_params`, dense and expert) but the word and position
    embeddings of the first rank and of the MTP rank's own embedding (module docstring)."""
    dense, expert = stage_params(job, lay, rank, chunks)
    arch = job.arch
    vocab = arch.padded_vocab(lay.tp)
    words = vocab * arch.hidden_size
    embedding = words / lay.tp + params.embedding_params(arch, vocab) - words
    mtp = lay.mtp_rank(arch.num_layers, arch.mtp_num_layers)
    lookups = int(rank == 0) + int(rank == mtp and rank != 0)
    return dense + expert - lookups * embedding


def seconds(job: Job, lay: Layout, rank: int, chunks: Chunks, gpu: Gpu) -> float:
    """Seconds per micro-batch pipeline rank `rank` spends adding its weight gradients into the
    main gradients (module docstring); 0 with the fusion, in torchtitan or a frozen model."""
    if job.gradient_accumulation_fusion or job.framework == "torchtitan" or job.frozen_model:
        return 0.0
    return unfused_params(job, lay, rank, chunks) * bytes_per_param(job, lay) / gpu.hbm
