"""Megatron-LM's rules on a model's gated delta nets (`planner.model.gdn`): what the mixer asserts
of its heads under tensor and context parallelism and of its in_proj under FP8, and that only
Megatron runs it.

Sources: Megatron-LM d98e8a64 megatron/core/transformer/transformer_config.py (`__post_init__`:
linear_num_key_heads and linear_num_value_heads multiples of tp x cp) and
megatron/core/ssm/gated_delta_net/common.py:205-210 (`_GDNBase.__init__`: under FP8 the in_proj
output width a multiple of `get_fp8_align_size(fp8_recipe)`, which is 32 for MXFP8 and 16 for
every other recipe, megatron/core/fp8_utils.py:356-361; the assertion's message says 16
whatever the recipe)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import gdn
from planner.search.rules.base import Violation, megatron_only


def heads(job: Job, lay: Layout) -> Violation | None:
    arch = job.arch
    if not arch.has_gdn:
        return None
    n_k, n_v, split = arch.linear_num_key_heads, arch.linear_num_value_heads, lay.tp * lay.cp
    if n_k % split or n_v % split:
        return Violation(
            "gdn_heads",
            "parallel.tp",
            f"linear_num_key_heads ({n_k}) and linear_num_value_heads ({n_v}) must be multiples "
            f"of tensor_model_parallel_size x context_parallel_size ({lay.tp} x {lay.cp})",
        )
    return None


def fp8_align(job: Job) -> int:
    """The multiple Megatron asserts of the in_proj width under FP8 (fp8_utils.py:356-361)."""
    return 32 if job.fp8_recipe == "mxfp8" else 16


def fp8(job: Job, lay: Layout) -> Violation | None:
    width, align = gdn.in_proj_width(job.arch), fp8_align(job)
    if job.arch.has_gdn and job.precision == "fp8" and width % align:
        return Violation(
            "gdn_fp8",
            "training.precision",
            f"FP8 ({job.fp8_recipe}) needs the gated delta net's in_proj width (2 qk + 2 vd + "
            f"2 value heads = {width}) to be a multiple of {align}",
        )
    return None


def framework(job: Job, lay: Layout) -> Violation | None:
    what = "a gated delta net (model.linear_attention_freq, or G in the hybrid pattern)"
    return megatron_only(job, job.arch.has_gdn, "gdn_framework", what)


RULES = (heads, fp8, framework)

STRUCTURAL_RULES = (heads, framework)
"""The rules that read the degrees alone."""
