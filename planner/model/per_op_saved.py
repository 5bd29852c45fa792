"""The collectives' outputs torchtitan's per-op selective checkpointing saves (its policy's
MUST_SAVE list), beyond the matmul and attention outputs `activations.per_op_bytes` counts.

pytorch/torchtitan b5bcd76c distributed/activation_checkpoint.py:61-63 (`comm_ops`) saves every
`_c10d_functional.reduce_scatter_tensor` and `_c10d_functional.all_to_all_single` output (e347b1e5
has the reduce-scatter in models/llama3/infra/parallelize.py:43 and both in
models/deepseek_v3/infra/parallelize.py:33-41). Its all-gathers are not on the list: the replay
re-runs them (`planner.model.layer_tp`). planner follows b5bcd76c's one list for every model;
the TOML target's e347b1e5 lists per model, and qwen3's (models/qwen3/infra/parallelize.py:39-54)
has no all-to-all, where deepseek_v3's (:41), gpt_oss's (:50) and llama4's (:59) have it: a
Qwen3 run of e347b1e5 at ep > 1 recomputes the dispatch and combine instead of keeping
`all_to_all_bytes`. A plan does not say which version runs it (one plan launches with either
target), so the larger figure, b5bcd76c's, is counted.

- Under TP (sequence parallel, as torchtitan's plans always are) each block ends in a
  reduce-scatter to Shard(1): the row-parallel wo and w2 (e347b1e5 models/llama3/infra/
  parallelize.py:232, :239), an MoE block's Partial output (models/llama4/infra/
  parallelize.py:520-527). One [T/tp, h] tensor a block.
- Under EP the dispatch and the combine run `all_to_all_single_autograd` (e347b1e5
  distributed/expert_parallel.py:138, :175). That autograd op's forward calls the
  `_c10d_functional::all_to_all_single` op through the dispatcher (pytorch
  torch/csrc/distributed/c10d/Functional.cpp, `AllToAllSingle::forward`; the autograd op is
  registered for the Autograd key only), so the checkpoint's dispatch mode sees, and saves, the
  `_c10d_functional` op: the routed rows this rank receives (k x T/tp x the routing load, h
  wide) and the rows returned for its own tokens (k x T/tp)."""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind
from planner.model.fp32 import word
from planner.model.moe_activations import pairs
from planner.model.shard import Shard


def reduce_scatter_bytes(arch: ModelArch, kind: LayerKind, sh: Shard) -> float:
    """Bytes of a layer's saved reduce-scatter outputs: one [T/tp, h] tensor a block under
    sequence-parallel TP, none without TP."""
    if sh.tp == 1 or not sh.sequence_parallel:
        return 0.0
    return kind.blocks * word(sh) * sh.tokens * arch.hidden_size / sh.tp


def all_to_all_bytes(arch: ModelArch, kind: LayerKind, sh: Shard, ep: int) -> float:
    """Bytes of an MoE layer's saved all-to-all outputs under expert parallelism `ep`: the
    dispatched rows received (at the busiest rank's load) and the combined rows returned; none
    at ep 1 (no all-to-all) or in a dense layer."""
    if ep == 1 or not kind.moe:
        return 0.0
    rows = pairs(arch, sh) + pairs(arch, sh, 1.0)
    return word(sh) * rows * arch.hidden_size
