"""What a torch split backward keeps between a chunk micro-batch's input-gradient part I and its
weight-gradient part W, beyond the activations its forward saved (which `in_flight` already keeps
until W): torchtitan's InterleavedZeroBubble, ZBVZeroBubble and DualPipeV
(`in_flight.SPLIT_BACKWARD`; schedules.py's runtime runs a BACKWARD_INPUT action as
`backward_one_chunk(full_backward=False)`, a FULL_BACKWARD one, DualPipeV's overlapped backward
included, as a whole backward that keeps nothing).

Source, pytorch/pytorch torch/distributed/pipelining (the split backward of the torch that
torchtitan b5bcd76c runs, 00722e64; read at its stored stage.py and _backward.py):

- _backward.py `stage_backward_input` finds, for every parameter, the first autograd nodes that
  depend on both the stage's input and that parameter (`get_param_groups`' "intermediates": a
  linear's matmul, a norm's scale), registers a prehook on each that stores the gradient flowing
  into it (`param_group["grads"][i] = grad_inputs`), and runs autograd.grad to the stage inputs
  with retain_graph=True; the stored gradients are freed only by `stage_backward_weight` (`del
  param_group["grads"]` after its autograd.grad to the weights).
- stage.py `backward_one_chunk(full_backward=False)` keeps (input_values, param_groups,
  stage_output, output_grads) in `backward_state` until `backward_weight_one_chunk` pops it: the
  stage's output tensor (detached, its storage alive; the last stage's is the loss) and the
  received gradient (a per-micro-batch receive buffer, `fsdp2.pipeline_buffers` counts it). The
  first stage does nothing at I (its whole backward runs at W): it keeps its output alone.

So a pending W holds, per layer, the gradient of every parameter-owning op's output: each linear's
output gradient on the tokens its GEMM runs (`gemm_shapes.linear_gemms`: M x N x count; a
row-parallel linear's is its partial [t, h] before the reduce-scatter, t whole under sequence
parallelism) and each norm's output gradient (t / tp under SP), at the activations' value bytes;
the last stage adds its final norm's and the output layer's (the local logits, t x V / tp), the
others their output [t / tp, h]. For a Llama layer (GQA, SwiGLU): 2 t [(h + 2 h_kv + 2 f) / tp +
2 h + 2 h / tp] bytes in bf16 (t = s b / cp, h_kv = kv heads x head dim), with SP.

Not counted here (tests/model/test_pending_w.py's docstring): non-reentrant activation
checkpointing's recompute under a split backward (torch.utils.checkpoint keys its recomputed
tensors by graph task, and I and each W group are separate autograd.grad calls). The stored
_backward.py read (pytorch 060ca5d7, older than 00722e64) enters no GraphExecGroup around
`stage_backward_input`'s autograd.grad or `stage_backward_weight`'s per-group ones; 00722e64's
own _backward.py and stage.py were not in the stored sources, so whether a split backward
recomputes a checkpointed block at I and again at W, keeping what W does not unpack, is not
established at the version torchtitan b5bcd76c runs and is not counted (an under-count risk
under activation checkpointing with these schedules)."""

from __future__ import annotations

from collections.abc import Sequence

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.model.gemm_shapes import linear_gemms
from planner.model.shard import Shard


def layer_grads(arch: ModelArch, kind: LayerKind, sh: Shard, layout: Layout) -> float:
    """Bytes of the output gradients one layer of `kind` keeps for a pending W (module
    docstring): its linear GEMMs' outputs, its norms' (one before the mixer, one before the
    MLP), an MoE router's logits."""
    t = sh.tokens
    local = t / sh.tp if sh.sequence_parallel else t
    gemms = linear_gemms(arch, t, sh.tp, layout.ep, layout.expert_tp, kind)
    elements = sum(m * n * count for m, _, n, count in gemms)
    elements += ((kind.mixer is not None) + (kind.ffn is not None)) * local * arch.hidden_size
    if kind.moe:
        elements += local * (arch.num_moe_experts or 1)
    return elements * sh.value_bytes


def chunk_pending(
    arch: ModelArch,
    layout: Layout,
    sh: Shard,
    counts: Sequence[tuple[int, ...]],
    first: Sequence[bool],
    last: Sequence[bool],
) -> tuple[float, ...]:
    """What one pending W keeps per chunk of a rank (module docstring): `counts` each chunk's
    count of each layer kind (`arch.kind_counts`), `first` / `last` whether it is the model's
    first / last stage."""
    t, h = sh.tokens, arch.hidden_size
    local = t / sh.tp if sh.sequence_parallel else t
    per_kind = [layer_grads(arch, k, sh, layout) for k in arch.kinds]
    out = []
    for n, is_first, is_last in zip(counts, first, last, strict=True):
        if is_last:  # the final norm's and the local logits' gradients; its output is the loss
            own = (local * h + t * arch.padded_vocab(sh.tp) / sh.tp) * sh.value_bytes
        else:  # the stage output kept in backward_state
            own = local * h * sh.value_bytes
        if is_first:  # no I: its output alone
            out.append(own)
            continue
        out.append(own + sum(c * b for c, b in zip(n, per_kind, strict=True)))
    return tuple(out)
