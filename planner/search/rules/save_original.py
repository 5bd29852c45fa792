"""Where Megatron-LM asks a Transformer Engine linear layer to save its original input
(`set_save_original_input`) and Transformer Engine raises because the recipe is delayed scaling.

Transformer Engine d0067d0d refuses save_original_input under the delayed FP8 recipe: the grouped
linear layer raises "DelayedScaling recipe is not supported with save_original_input" in its
forward wherever the weight needs a gradient (module/grouped_linear.py:677-679; the plain linear
layer likewise for a delayed-scaling quantiser, module/linear.py:317-326). Megatron-LM d98e8a64
asks it of:

- the attention's output projection only under a recipe other than delayed (attention.py:428-444);
- the routed experts' fc2 under the moe_act recompute with FP8 (transformer MoE experts.py
  :269-276), which TransformerConfig refuses first under delayed scaling (transformer_config.py
  :2000-2006; planner's `features.recompute`);
- the routed experts' fc1 when fine-grained offloading moves expert_fc1 under any recipe but
  MXFP8 and NVFP4 (experts.py:279-284, "to avoid the CPU overhead of multiple d2h copies"), with
  no check in TransformerConfig: under delayed scaling the first forward raises. Refused here
  (`expert_fc1_delayed`), unless the weights are frozen (no weight gradient, no check).
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search.rules.base import Rule, Violation


def runs(job: Job, modules: tuple[str, ...]) -> bool:
    """Whether fine-grained offloading of `modules` passes `expert_fc1_delayed` (what the search
    asks of its offloading rungs, `planner.search.rungs.offloading`)."""
    if "expert_fc1" not in modules or job.framework != "megatron" or job.frozen_model:
        return True
    return not (job.precision == "fp8" and job.fp8_recipe == "delayed")


def expert_fc1_delayed(job: Job, lay: Layout) -> Violation | None:
    """The expert_fc1 offload under the delayed FP8 recipe (module docstring)."""
    if runs(job, lay.offload_modules):
        return None
    return Violation(
        "offload_fc1_delayed",
        "parallel.offload_modules",
        "offload module expert_fc1 does not run under the delayed FP8 recipe: Megatron asks the "
        "experts' fc1 to save its original input, and Transformer Engine raises 'DelayedScaling "
        'recipe is not supported with save_original_input\'; use fp8_recipe = "tensorwise" '
        "(or another) or drop expert_fc1",
    )


RULES: tuple[Rule, ...] = (expert_fc1_delayed,)
