"""The word embedding's gradient work outside the decoder layers, in Megatron-LM (d98e8a64).

Sync (`sync_time`): where the first and the last pipeline rank both hold the word embedding (a
tied output layer with pp > 1, or MTP layers on the last rank, which build their own embedding),
`finalize_model_grads` all-reduces its main gradient between them
(distributed/finalize_model_grads.py:145-147 `_get_shared_word_embedding_weight`, :204-258
`_allreduce_embedding_grad`), after the data-parallel sync (:640 `finish_grad_sync`, then :676):
once a step, synchronous, on those two ranks. The group is the first and the last rank of each
pipeline group (parallel_state.py:560-566 `default_embedding_ranks`, :1269), (pp - 1) x the
pipeline stride apart (`dp_sync.pp_stride`: tp x cp x dp, or tp x cp under
use_tp_pp_dp_mapping). The tensor is the V_padded / tp x h main gradient (`Job.grad_bytes`: fp32
unless 16-bit main gradients); under Megatron-FSDP (ZeRO 2/3) the rank's local shard of it
(:247-249 `orig_grad._local_tensor`: 1 / (dp x cp) of it, of one optimizer instance's).
Untied without MTP, pp 1 or a frozen model: nothing (the weight getter returns None, the group
has one rank, the gradient is None).
torchtitan refuses tied weights with pp > 1 (`planner.search.rules.torchtitan_tied`).

Backward (`backward_time`): each lookup of the word embedding (the first rank's, and each MTP
depth's on the MTP rank, multi_token_prediction.py:1302) runs F.embedding's dense backward
(tensor_parallel/layers.py:358-362): a V_padded / tp x h gradient in the parameters' dtype,
zero-filled and then scattered into (the scatter touches only the tokens' rows), and DDP's hook
adds it to the main gradient (distributed_data_parallel.py:578 `param.main_grad.add_`): per
element the zero fill's write, the add's read of it, the main gradient read and written, at the
GPU's achieved HBM bandwidth, every micro-batch. bf16 with fp32 main gradients: 2 + 2 + 4 + 4 =
12 bytes an element. Megatron-LM only (torchtitan's FSDP2 reduces the gradient itself).
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, dp_sync
from planner.model.fp32 import value_bytes
from planner.model.gemm import Gpu


def shares_embedding(job: Job, lay: Layout) -> bool:
    """Whether Megatron all-reduces the word embedding's gradient between the first and the last
    pipeline rank (module docstring)."""
    arch = job.arch
    if job.framework == "torchtitan" or lay.pp <= 1 or job.frozen_model:
        return False
    return not arch.untie_embeddings_and_output_weights or arch.mtp_num_layers > 0


def sync_bytes(job: Job, lay: Layout) -> float:
    """Bytes each of the two ranks all-reduces: the V_padded / tp x h main gradient, its local
    1 / (dp x cp) shard under Megatron-FSDP (ZeRO 2/3); 0 where nothing is shared."""
    if not shares_embedding(job, lay):
        return 0.0
    words = job.arch.padded_vocab(lay.tp) // lay.tp * job.arch.hidden_size
    # Megatron-FSDP shards over one optimizer instance's dp x cp ranks (mcore_fsdp_adapter.py
    # :346-356, partial_data_parallel; `planner.model.dp_instances`)
    shard = max(lay.dense_dp // job.optimizer_instances, 1) if lay.zero_stage >= 2 else 1
    return words * job.grad_bytes / shard


def sync_time(job: Job, lay: Layout, rank: int) -> float:
    """Seconds per step pipeline rank `rank` spends in the embedding-gradient all-reduce: the
    first and the last rank only. The pair is placed as groups of 2 ranks half a pipeline block
    (pp x the pipeline stride) apart: exactly the pair's ranks at pp 2, and for power-of-two
    blocks and domains the same domains as the first and the last member of a block."""
    if rank not in (0, lay.pp - 1):
        return 0.0
    size = sync_bytes(job, lay)
    if size <= 0:
        return 0.0
    grp = comms.place(job.cluster, max(lay.pp * dp_sync.pp_stride(lay) // 2, 1), 2)
    return comms.all_reduce(size, grp)


BACKWARD_GRAD_PASSES = 2.0
"""F.embedding's dense gradient, in the parameters' dtype: written by the zero fill, read by the
main gradient's add (module docstring)."""


def backward_time(job: Job, lay: Layout, gpu: Gpu) -> float:
    """Seconds of one lookup's dense backward per micro-batch (module docstring): V_padded / tp
    x h elements, the gradient written and read (2 x `fp32.value_bytes`) and the main gradient
    read and written (2 x `Job.grad_bytes`), at `Gpu.hbm`; 0 in torchtitan or a frozen model."""
    if job.framework == "torchtitan" or job.frozen_model:
        return 0.0
    words = job.arch.padded_vocab(lay.tp) // lay.tp * job.arch.hidden_size
    per = BACKWARD_GRAD_PASSES * value_bytes(job) + 2 * job.grad_bytes
    return words * per / gpu.hbm
