"""Which attention kernel a torchtitan plan runs (`backend`), by era and model, and the
FlexAttention block mask it keeps (`block_mask_bytes`).

The era. A plan torchtitan's TOML target (e347b1e5) refuses is the Python configurations'
(b5bcd76c: `planner.inputs.torchtitan_era.python_config_era`), as is a deterministic one without
`[torchtitan] deterministic_fill` (the TOML target refuses it, `planner.emit.torchtitan`; the
module target refuses the fill); any other plan is timed as e347b1e5 runs it, the training code
planner models (the module's header says how b5bcd76c differs).

e347b1e5 (attn_type, a flavor field, no TOML key): Llama 3, Qwen3 and Llama 4 flavors run SDPA
(models/llama3/model/args.py:45, models/qwen3/model/args.py:39, models/llama4/model/args.py:47:
"sdpa"; only the debug, _flex, _varlen and _irope flavors, none of planner's, set another),
DeepSeek-V3's 16B and 671B flavors FlexAttention with a per-document ("block_causal") mask
(models/deepseek_v3/__init__.py:100-101, :154-155), gpt-oss FlexAttention, causal
(models/gpt_oss/model/args.py:66-67). SDPA is cuDNN's kernel ("fused"; FlashAttention-2 under
debug.deterministic, `planner.model.titan_sdpa`).

b5bcd76c (model_registry's attn_backend): "flex" by default (models/llama3/__init__.py:371,
qwen3/__init__.py:615, deepseek_v3/__init__.py:618), gpt-oss "varlen" (gpt_oss/__init__.py:391;
the module target writes attn_backend='flex' under CP, which varlen does not run); "sdpa" raises
for language models (models common config_utils.py:97-101). Varlen is PyTorch's flash backend
(torch/nn/attention/varlen.py, pytorch 255ac567: `_should_use_cudnn` returns False, then
aten._flash_attention_forward / _backward) with FA3 on Hopper and FA4 on Blackwell activated
(b5bcd76c models common attention.py:128-135, tools/utils.py:36-43): timed at the fused rates,
as FA3 / FA4 run about cuDNN's (`planner.model.attention`).

FlexAttention is a Triton kernel torch.compile generates (e347b1e5 models/attention.py:126-154;
b5bcd76c models common attention.py:224-260, "flex"; "flex_flash", FA4 inside FlexAttention, only
when asked). No published forward and backward rate of it on H100 / H200 / B200 was found that
planner's tables could take (`planner.model.attention`): it is timed at the fused (cuDNN) rates,
which makes the attention's time, and the step's, optimistic (`planner.model.known_gaps`).
Nor is the per-document mask's sparsity modelled: the causal work is counted, an upper bound.
"""

from __future__ import annotations

import math
from typing import Literal

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan import MODELS, zoo_flavor
from planner.inputs.torchtitan_era import python_config_era
from planner.model.torch_schedules import schedule_microbatches

Backend = Literal["sdpa", "flex", "varlen"]

TOML_FLEX_MODELS = frozenset({"deepseek_v3", "gpt_oss"})
"""torchtitan models whose e347b1e5 flavors (planner's) run FlexAttention (module docstring);
the others' attn_type defaults to "sdpa" (models/llama3/model/args.py:45, models/qwen3/model/
args.py:39, models/llama4/model/args.py:47), which their 8B / 70B / 405B, Qwen3 and 17bx16e /
17bx128e flavors leave (only the debug and irope flavors set flex or varlen)."""


def toml_backend(name: str) -> Backend:
    """The attention e347b1e5's flavors of torchtitan model `name` run (`TOML_FLEX_MODELS`)."""
    return "flex" if name in TOML_FLEX_MODELS else "sdpa"


BLOCK_CAUSAL_MODELS = frozenset({"deepseek_v3"})
"""e347b1e5 models whose flavors' mask is per document ("block_causal"): their BlockMask has the
batch's rows (models/deepseek_v3/model/model.py:456-477: B = input_batch.shape[0]; a causal
mask, gpt-oss's, B = 1)."""

SPARSE_BLOCK = 128
"""FlexAttention's BlockMask tile, both sides (torch/nn/attention/flex_attention.py
_DEFAULT_SPARSE_BLOCK_SIZE; b5bcd76c FlexAttention.Config.block_size defaults to it, models
common attention.py:238)."""

INT32 = 4.0


def module_era(job: Job, layout: Layout) -> bool:
    """Whether the plan is torchtitan's Python configurations' (b5bcd76c; module docstring)."""
    if job.deterministic and not job.titan.deterministic_fill:
        return True
    return python_config_era(job, layout) is not None


def backend(job: Job, layout: Layout) -> Backend | None:
    """The attention a torchtitan plan runs (module docstring); None outside torchtitan, without
    flash attention, or for a model of no torchtitan flavor (whose launch is refused)."""
    if job.framework != "torchtitan" or not job.flash_attention:
        return None
    zoo = zoo_flavor(job.arch)
    if zoo is None:
        return None
    name = MODELS[zoo][0]
    if module_era(job, layout):
        return "varlen" if name == "gpt_oss" and layout.cp == 1 else "flex"
    return toml_backend(name)


def block_mask_bytes(job: Job, layout: Layout) -> float:
    """Bytes of the FlexAttention BlockMasks a step keeps on every rank (0 without flex).

    A BlockMask holds 8 int32 tensors (torch/nn/attention/flex_attention.py `BlockMask`, at
    pytorch c98133c3: kv_num_blocks and full_kv_num_blocks [B, H, rows], kv_indices and
    full_kv_indices [B, H, rows, cols], and their transposes for the backward, q_num_blocks,
    full_q_num_blocks [B, H, cols] and q_indices, full_q_indices [B, H, cols, rows]), with rows =
    cols = ceil(L / 128) tiles: 4 x 4 bytes x B x H x (n^2 + n). torchtitan builds it once per
    forward-backward for its whole batch (e347b1e5 train.py:457-466, forwarded to every pipeline
    stage; b5bcd76c models common decoder.py:301-320), H = 1 (head-independent). Under gradient
    accumulation a step runs k forward-backwards one after another (e347b1e5 train.py:561-584),
    each over one pipeline schedule's batch, so a rank holds one schedule's masks at a time:
    - e347b1e5: L = seq, B = the batch (micro-batch x one schedule's micro-batches under PP,
      `torch_schedules.schedule_microbatches`: the step's over k) for a per-document mask, 1 for
      a causal one (`BLOCK_CAUSAL_MODELS`);
    - b5bcd76c: B = 1 over the packed tokens, L = that batch x seq.
    gpt-oss builds two (its windowed layers' and its full ones'). At seq 4,096 and one sample:
    n = 32, 16 x (1,024 + 32) = 16,896 bytes; at 131,072: n = 1,024, about 16 MiB."""
    if backend(job, layout) != "flex":
        return 0.0
    zoo = zoo_flavor(job.arch)
    assert zoo is not None  # backend: a flavor's
    name = MODELS[zoo][0]
    samples = layout.micro_batch_size
    if layout.pp > 1:  # one schedule's micro-batches: the batch of one of k accumulation steps
        samples *= schedule_microbatches(job, layout)
    if module_era(job, layout):
        batch, length = 1, samples * job.seq_length
    else:
        batch = samples if name in BLOCK_CAUSAL_MODELS else 1
        length = job.seq_length
    n = math.ceil(length / SPARSE_BLOCK)
    masks = 2 if job.arch.window_size is not None else 1
    return masks * batch * 4 * INT32 * (n * n + n)
