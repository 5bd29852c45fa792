"""The MoE router's dtype (Megatron --moe-router-dtype, `Job.moe_router_dtype`) and what it costs
beyond the router: the bytes of the expert output a dispatcher reduce-scatters before its
combine, and the copy it makes for that. From NVIDIA/Megatron-LM d98e8a64:

- the flag is TransformerConfig.moe_router_dtype (transformer_config.py:811, choices fp32 /
  fp64, default None), added to the parser from the dataclass (training/arguments.py:2373);
- the router's gating GEMM returns its logits in that dtype (router.py:106-111, None: the
  input's), and the probabilities take the logits' dtype (moe_utils.py:936
  `probs = probs.type_as(logits)`), so without the flag they are the hidden states' dtype;
- the allgather dispatcher's combine reduce-scatters `hidden_states.to(self.local_probs.dtype)`
  over the expert-TP x EP group and casts the result back (token_dispatcher.py:365-367); the
  alltoall dispatcher does the same for its expert-TP reduce-scatter before the all-to-all
  (:829-833, `self.probs` set at :642), whose all-to-all itself stays in the hidden states'
  dtype. Autograd's gradients of those casts make the backward's all-gather of the output
  gradient the same dtype. A cast to the tensor's own dtype is a no-op: fp32 in fp32 training
  copies nothing;
- the flex dispatcher (DeepEP, HybridEP) upcasts the probabilities to fp32 whatever the flag
  (token_dispatcher.py:1136-1141, :1313-1319) and casts no tokens; the dispatchers call
  `unpermute` without probabilities (:346, :891, :1460), so its promotion of the tokens to the
  probabilities' dtype (moe_utils.py:594-598) does not run; the experts weight their
  activation by the probabilities and cast the product back (experts.py:959-962, :1014-1016).

Not counted: the probabilities' own collectives (the allgather dispatcher gathers them,
tokens x E values; the alltoall dispatcher sends one per routed copy), E / h of the tokens'
bytes or less; fp64's gating GEMM, which runs as torch.mm in fp64 (moe_utils.py:1389-1399),
timed as the bf16 one (no catalog GPU lists an FP64 peak); the unfused weighted activation's
transient fp32 product (experts.py:1014-1016, without --bias-swiglu-fusion)."""

from __future__ import annotations

from planner.inputs.plan import Job
from planner.model.fp32 import value_bytes

ROUTER_DTYPE_BYTES = {"fp32": 4.0, "fp64": 8.0}
"""Bytes per element of --moe-router-dtype's choices."""


def combine_bytes(job: Job) -> float:
    """Bytes per element of the reduce-scatter before a MoE layer's combine, and of its
    gradient's all-gather (module docstring): the router's dtype where Megatron-LM runs with
    --moe-router-dtype, else the hidden states' (`fp32.value_bytes`). torchtitan has no such
    cast."""
    dtype = job.moe_router_dtype if job.framework == "megatron" else None
    return ROUTER_DTYPE_BYTES[dtype] if dtype is not None else value_bytes(job)


def cast_bytes(job: Job) -> float:
    """Bytes per element of the copy that cast makes (`Shard.combine_cast_bytes`): the router's
    dtype where it differs from the hidden states', else 0 (the cast returns its input)."""
    wide = combine_bytes(job)
    return wide if wide != value_bytes(job) else 0.0
