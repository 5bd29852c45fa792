"""torchtitan's context parallelism as PyTorch runs it: the all-gathered K/V of one attention block,
its memory and its time (`planner.model.cp_time` is Megatron-LM's, Transformer Engine's).

What runs. torchtitan e347b1e5 applies CP to each attention module through PyTorch's
_ContextParallel style (distributed/context_parallel.py:27-86, from every model's parallelize);
the exchange is PyTorch's `_ContextParallelOptions.rotate_method`, whose default is ALL_GATHER
(pytorch 09b101c5 torch/distributed/tensor/experimental/_context_parallel/_attention.py), and
training never sets another: `set_rotate_method` is called only in
create_context_parallel_ctx (distributed/utils.py:200-216), which only validate.py:207-213
calls, so `parallelism.context_parallel_rotate_method` reaches the validation loop alone.
b5bcd76c all-gathers K/V too (models common attention.py:797-799; its FlexAttention's
flex_cp_allgather). In `_templated_ring_attention` the _AllGatherRotater gathers the rank's
K and V (torch.cat of the two, all_gather_tensor) once, at step 0, and the loop's cp steps take
their chunk of the gathered buffer; the backward (`_templated_ring_attention_backward`)
gathers K/V again and passes the dK/dV accumulators round the ring by all-to-all (the
ALL_TO_ALL rotater, permute_tensor) every step. With convert_to_f32 (on by default) the
forward's merger keeps the output in fp32 and the backward accumulates dQ, dK and dV in fp32
(accum_dtype).

Memory (`exchange_bytes`): what the exchange holds beyond the saved activations while one
attention block runs, counted by the tensors' last uses (what inductor's buffer reuse keeps,
and eager's reference counts about): KV the rank's K + V bytes in bf16, Q and O its query and
output bytes.

- Forward: the gathered cp KV through the loop; at step 0 the concatenated own K/V, the
  gather's input (KV), and the first step's output O with its fp32 copy (2 O); at every later
  step the merger's fp32 output (2 O), the step's output (O) and the updated fp32 output (2 O):
  cp KV + max(KV + 3 O, 5 O).
- Backward: the re-gathered cp KV; the fp32 dQ (2 Q); the fp32 dK/dV concatenated and sent on
  (2 KV) while the next step's kernel runs, and what the all-to-all receives (2 KV), beside the
  step's own gradients in bf16 (Q + KV): (cp + 5) KV + 3 Q; and where a rank's step updates
  half of dQ (`_partial_update`, the steps past its rank under load balancing) the fp32 dQ
  twice while torch.cat builds the new one (4 Q) beside the half step's dQ (Q / 2) and the
  dK/dV in flight, sent and received (4 KV): (cp + 4) KV + 4.5 Q.

Not counted: the fp32 log-sum-exp (1/64 of O at head dim 128), eager's unfused temporaries of
the merger's update (out - block_out and its product with the sigmoid, 2 O each), and names
Python holds past their last use.

Time (`context_parallel`): the gather waits at step 1, under step 0's attention (a 1/cp share
of the load-balanced kernel, `planner.model.ring_balance`); in the backward the same, then the
fp32 dK/dV (2 KV bytes) sent at step i is waited for after step i + 1's kernel, the last one
after the loop: cp - 1 hops each against a 1/cp share, the last exposed. n_fwd forward passes
(2 under full recompute) gather again.
"""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.inputs.hardware import ClusterSpec
from planner.inputs.layout import Layout
from planner.model import comms
from planner.model.cp_time import head_widths, kv_bytes
from planner.model.shard import BF16

FP32_OVER_BF16 = 2
"""convert_to_f32's accumulators and merged output hold 4-byte values where the kernels' are
2-byte bf16 (`_ContextParallelOptions.convert_to_f32`, default True)."""


def exchange_bytes(arch: ModelArch, lay: Layout, t: float) -> float:
    """Bytes torchtitan's all-gathered CP holds beyond the saved activations while one attention
    block runs on a rank of t local tokens, the larger of its forward's and its backward's
    (module docstring)."""
    cp = lay.cp
    kv = kv_bytes(arch, t, lay.tp)
    qk, v = head_widths(arch)
    heads = t * arch.num_attention_heads / lay.tp * BF16
    q, o = heads * qk, heads * v
    f32 = FP32_OVER_BF16
    fwd = cp * kv + max(kv + (1 + f32) * o, (1 + 2 * f32) * o)
    bwd = max((cp + 2 * f32 + 1) * kv + (f32 + 1) * q, (cp + 2 * f32) * kv + (2 * f32 + 0.5) * q)
    return max(fwd, bwd)


def context_parallel(
    cluster: ClusterSpec,
    lay: Layout,
    arch: ModelArch,
    t: float,
    attention: tuple[float, float],
    n_fwd: int,
) -> tuple[float, float]:
    """(exposed, hidden) seconds per micro-batch of one attention block's all-gathered CP on a
    rank of t local tokens (module docstring); `attention` the block's attention kernel
    (forward, backward) seconds, n_fwd its forward passes."""
    tp, cp = lay.tp, lay.cp
    if cp <= 1:
        return 0.0, 0.0
    kv = kv_bytes(arch, t, tp)
    gather = comms.all_gather(cp * kv, comms.place(cluster, tp, cp))
    hop = comms.p2p(FP32_OVER_BF16 * kv, comms.p2p_link(cluster, tp, cp))
    step_f, step_b = attention[0] / cp, attention[1] / cp
    fwd_exposed = max(gather - step_f, 0.0)
    bwd_exposed = max(gather - step_b, 0.0) + (cp - 1) * max(hop - step_b, 0.0) + hop
    exposed = n_fwd * fwd_exposed + bwd_exposed
    total = (n_fwd + 1) * gather + cp * hop
    return exposed, total - exposed
