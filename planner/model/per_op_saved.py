"""The collectives' outputs torchtitan's per-op selective checkpointing saves (its policy's
MUST_SAVE list), beyond the matmul and attention outputs `activations.per_op_bytes` counts.

pytorch/torchtitan b5bcd76c distributed/activation_checkpoint.py:61-63 (`comm_ops`) saves every
`_c10d_functional.reduce_scatter_tensor` and `_c10d_functional.all_to_all_single` output (e347b1e5
has the reduce-scatter in models/llama3/infra/parallelize.py:43 and both in
models/deepseek_v3/infra/parallelize.py:33-41). Its all-gathers are not on the list: the replay
re-runs them (`planner.model.layer_tp`). Which models save the all-to-all depends on the
torchtitan version (`saves_all_to_all`, `ALL_TO_ALL_MODELS`): b5bcd76c's one list serves every
model; the TOML target's e347b1e5 lists per model, and qwen3's (models/qwen3/infra/
parallelize.py:39-54: mm, the SDPA kernels, reduce_scatter_tensor, max, flex_attention,
varlen attention, inductor_compiled_code) has no all-to-all, where deepseek_v3's (:33-48, the
all-to-all at :41), gpt_oss's (:42-57, :50) and llama4's (:51-66, :59) have it (llama3's, :36-51,
none; a dense model runs none). So a Qwen3 run of e347b1e5 at ep > 1 recomputes the dispatch and
the combine in the backward instead of keeping `all_to_all_bytes`. A plan does not say which
version runs it (the TOML target writes for e347b1e5, the module target for b5bcd76c, from one
plan): the callers pass no version, and an unknown version keeps the larger figure, b5bcd76c's.

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
from planner.inputs.torchtitan import MODELS, flavor_name
from planner.model.fp32 import word
from planner.model.moe_activations import pairs
from planner.model.shard import Shard
from planner.model.titan_version import TitanVersion

ALL_TO_ALL_MODELS: dict[TitanVersion, frozenset[str] | None] = {
    "e347b1e5": frozenset({"deepseek_v3", "gpt_oss", "llama4"}),
    "b5bcd76c": None,
}
"""torchtitan model names whose per-op save list holds `_c10d_functional.all_to_all_single`, by
version; None: every model's (b5bcd76c distributed/activation_checkpoint.py:60-63, the one list).
e347b1e5: models/deepseek_v3/infra/parallelize.py:41, gpt_oss/infra/parallelize.py:50,
llama4/infra/parallelize.py:59; not qwen3/infra/parallelize.py:39-54 (the module docstring)."""


def saves_all_to_all(arch: ModelArch, version: TitanVersion | None = None) -> bool:
    """Whether torchtitan `version`'s per-op policy saves the EP all-to-alls' outputs for `arch`
    (`ALL_TO_ALL_MODELS`, the model by `planner.inputs.torchtitan.flavor_name`). An unknown
    version (None) or a model no torchtitan flavor has: saved, the larger figure."""
    if version is None:
        return True
    models = ALL_TO_ALL_MODELS[version]
    if models is None:
        return True
    name = MODELS.get(flavor_name(arch), ("", ""))[0]
    return name in models or not name


def reduce_scatter_bytes(arch: ModelArch, kind: LayerKind, sh: Shard) -> float:
    """Bytes of a layer's saved reduce-scatter outputs: one [T/tp, h] tensor a block under
    sequence-parallel TP, none without TP."""
    if sh.tp == 1 or not sh.sequence_parallel:
        return 0.0
    return kind.blocks * word(sh) * sh.tokens * arch.hidden_size / sh.tp


def all_to_all_bytes(
    arch: ModelArch, kind: LayerKind, sh: Shard, ep: int, version: TitanVersion | None = None
) -> float:
    """Bytes of an MoE layer's saved all-to-all outputs under expert parallelism `ep`: the
    dispatched rows received (at the busiest rank's load) and the combined rows returned; none
    at ep 1 (no all-to-all), in a dense layer, or where torchtitan `version` does not save them
    (`saves_all_to_all`; None, unknown: saved)."""
    if ep == 1 or not kind.moe or not saves_all_to_all(arch, version):
        return 0.0
    rows = pairs(arch, sh) + pairs(arch, sh, 1.0)
    return word(sh) * rows * arch.hidden_size
