"""What Megatron-LM's --deterministic-mode (`Job.deterministic`; torchtitan's debug.deterministic)
adds to a step.

What the mode does (Megatron-LM d98e8a64, megatron/training/determinism.py,
apply_determinism_to_args): it asserts the fused cross entropy and TP communication overlap off,
sets NCCL_ALGO=Ring, NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 and CUBLAS_WORKSPACE_CONFIG=:4096:8 where
the launcher has not, and calls torch.use_deterministic_algorithms(True); Megatron-Core then takes
its deterministic branches (docs/developer/determinism/op-catalog.md: the MoE unpermute by
index_add_, the routing map by index_put_, the embedding by indexing, Transformer Engine's
deterministic attention backends). What it costs, by Megatron's own measurements
(docs/developer/determinism/status.md and op-catalog.md "Performance Notes"): "roughly 15%" of
the step time, "approximately four percent on a large dense model to approximately 17% on a
hybrid MoE model"; its CI gate (tests/performance_tests/shell_test_utils/determinism/
print_nsys_leaderboard.py) fails a 4-layer, hidden-1024 GPT at tp 2 on 8 H100 whose deterministic
step exceeds 1.35x the default one.

What planner charges:
- The host. With deterministic algorithms on, PyTorch fills every tensor its empty* factories
  allocate (torch.utils.deterministic.fill_uninitialized_memory, on by default: ATen
  TensorFactories.h `fill_empty_deterministic_`, NaN for floating point), one more dispatched op
  and kernel per allocation, beside the deterministic branches' own ops. DETERMINISTIC_ISSUE
  scales a layer's eager issue (`planner.model.host.floor_s`) and its kernel count
  (`host.kernels`, the small-kernel floor of `planner.model.layer_time`).
- The GPU. Each fill writes its tensor once more: the forward's outputs, about the layer's saved
  activations, and the backward's gradients of them: FILL_PASSES x the saved-activation bytes at
  HBM bandwidth, beside the layer's elementwise traffic (`layer_time.ELEMENTWISE_PASSES`).

- The attention backward. NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 makes Transformer Engine take a
  deterministic backward, which sums dQ in a fixed order instead of by atomic adds:
  DETERMINISTIC_ATTENTION_BWD times the kernel's matmul time (`planner.model.attention_time`).

torchtitan's debug.deterministic calls torch.use_deterministic_algorithms(True) too. e347b1e5
leaves fill_uninitialized_memory on (distributed/utils.py:114-124: the host and GPU charges
above, `[torchtitan] deterministic_fill`, which a TOML sets); b5bcd76c turns it off
(distributed/utils.py:201-206: nothing charged). Under torch.compile the compiled blocks'
buffers are inductor's own allocations, which skip the fill (pytorch/pytorch issue 174386,
"torch.compile ignores torch.use_deterministic_algorithms(True) on empty_like", open; and the
review of PR 178119: the fill "shouldn't apply to internal inductor allocations"): a compiled
torchtitan job is charged no fill. Neither era is charged the attention factor, which is
Transformer Engine's deterministic backend under NVTE_ALLOW_NONDETERMINISTIC_ALGO=0.

Not charged (no published rate to model them by): the deterministic MoE kernels' GPU time beyond
their issue, the pinned cuBLAS workspace, and NCCL's ring in place of its tree or NVLS for an
all-reduce (latency-bound sizes only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.inputs.plan import Job

DETERMINISTIC_ISSUE = 1.20
"""Fitted (benchmarks/fit_host.py, on Megatron-LM's functional tests, 3 in 4 of which run in
deterministic mode). A layer's host operations in deterministic mode over the default mode's:
the allocation fills and the deterministic branches."""
FILL_PASSES = 2.0
"""Counted, not fitted: HBM writes of the fills, in multiples of a layer's saved-activation
bytes: one for the forward's allocated outputs, one for the backward's gradients of them."""


DETERMINISTIC_ATTENTION_BWD = 2.900 / 2.391
"""Counted, not fitted: a flash-attention backward's time in deterministic mode over the default
one (dQ reduced in a fixed order rather than by atomic adds). FlashAttention-3 on H100, head dim
128, causal, 8,192 tokens, 16 heads: 2.900 ms with its deterministic schedule against 2.391 ms
without (Dao-AILab/flash-attention PR #1893, "Improve causal backward determinism perf with SPT
schedule", its benchmark table): 1.213. Transformer Engine's deterministic path is cuDNN's:
cudnn-frontend's SDPA benchmark times it on GB200 and GB300 (benchmarks/attention_kernels.py:
1.11-1.16 for Llama's GQA at head dim 128, 0.95-1.09 for MLA, 1.27-1.31 for gpt-oss's windowed
64-wide heads in bf16; 1.00 at every shape with FP8 operands), no Hopper pair. Taken in bf16 on
every GPU, 1 with FP8 attention, for Megatron's mode only (torchtitan's deterministic kernels
are not modelled)."""


def attention_bwd_factor(job: Job) -> float:
    """How much longer the flash-attention backward's matmuls take in the job's mode
    (DETERMINISTIC_ATTENTION_BWD under Megatron's deterministic mode, else 1; 1 with FP8
    attention, whose backward cuDNN runs alike either way: benchmarks/attention_kernels.py)."""
    megatron = job.deterministic and job.framework != "torchtitan"
    return DETERMINISTIC_ATTENTION_BWD if megatron and not job.attention_in_fp8 else 1.0


def fills(job: Job) -> bool:
    """Does the job fill its allocations? Megatron's deterministic mode does; torchtitan's
    debug.deterministic does where it leaves fill_uninitialized_memory on (`[torchtitan]
    deterministic_fill`: e347b1e5, a TOML's) and its blocks run eager (not `Job.compiled`:
    inductor's buffers skip the fill); b5bcd76c turns the fill off."""
    if not job.deterministic:
        return False
    if job.framework != "torchtitan":
        return True
    return job.titan.deterministic_fill and not job.compiled


def issue_factor(job: Job) -> float:
    """The job's host operations per layer over the default mode's (DETERMINISTIC_ISSUE)."""
    return DETERMINISTIC_ISSUE if fills(job) else 1.0


def fill_bytes(job: Job, saved_bytes: float) -> float:
    """HBM bytes the fills write per layer and micro-batch, forward and backward together, for a
    layer that saves `saved_bytes` of activations."""
    return FILL_PASSES * saved_bytes if fills(job) else 0.0
