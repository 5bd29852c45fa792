"""What Megatron-LM's reinforcement-learning step (`train_rl.py --perform-rl-step`) keeps on a GPU
besides the model it trains: the rollout engine's KV cache and, where the rollouts run at their
own parallelism, a second copy of the model's weights.

KV cache: the dynamic inference context allocates its block pool once, up front, and keeps it
(Megatron-LM d98e8a64 megatron/core/inference/contexts/dynamic_context.py: `buffer_size_bytes =
buffer_size_gb * 1024**3`, `--inference-dynamic-batching-buffer-size-gb`, default 40,
megatron/training/arguments.py); under unified memory (level 1) the paused-request overflow lives
in CPU memory and only buffer_size_gb sits on the GPU (`Job.rl_kv_cache_bytes`).

Separate inference model: built when any of --rl-inference-{tensor,pipeline,expert,expert-tensor}
-model-parallel-size is given or training uses context parallelism (megatron/training/training.py
`perform_rl_step`: "Building separate RL inference model with custom parallelism"), at that
parallelism (`Job.rl_inference_parallel`, the training degrees where one is not given, CP 1), with
16-bit weights and neither gradients nor optimizer states. Offloading it when idle
(--rl-offload-inference-model-weights-when-idle) prefetches its unified-memory pages to the CPU or
pauses them (torch_memory_saver); the allocation stays, so PyTorch's allocator keeps counting it:
planner counts its weights on every GPU for the whole step.
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.stage_params import stage_params

WEIGHT_BYTES = 2.0
"""Bytes per parameter of the inference model (bf16, as the trained model's weights)."""


def resident_bytes(job: Job, layout: Layout) -> float:
    """Bytes the RL step's rollout engine keeps allocated on one GPU: the KV cache and the weights
    of a separate inference model on its most loaded pipeline rank (0 without RL)."""
    total = job.rl_kv_cache_bytes
    if job.rl_inference_parallel is not None:
        total += WEIGHT_BYTES * inference_model_params(job, layout)
    return total


def inference_model_params(job: Job, layout: Layout) -> float:
    """Parameters one GPU holds of the separate inference model: (tp, pp, ep, etp) of
    `Job.rl_inference_parallel`, CP 1, on the same GPUs; the most of any of its pipeline ranks."""
    assert job.rl_inference_parallel is not None
    tp, pp, ep, etp = job.rl_inference_parallel
    world = layout.tp * layout.pp * layout.cp * layout.dp
    dp = max(world // (tp * pp), 1)
    lay = Layout(tp=tp, pp=pp, dp=dp, ep=ep, etp=etp)  # an even split of the layers
    ranks = lay.chunk_layers(job.arch.num_layers)
    return max(sum(stage_params(job, lay, r, ranks[r])) for r in range(pp))
