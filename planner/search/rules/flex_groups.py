"""Flex dispatcher group sizes its backends refuse (the ep x etp ranks it dispatches over).

Megatron-LM's DeepEP (d98e8a64 megatron/core/transformer MoE fused_a2a.py:48-51) asks DeepEP
for its configs of the group size, and deepseek-ai/DeepEP dd758caf deep_ep/buffers/legacy.py:259,
:293 assert `num_ranks in config_map` (2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160:
`buffers.DEEPEP_CONFIGS`; its Buffer also asserts at most 8 x 20 ranks and a multiple of 8 above
8, csrc/legacy/buffer.hpp:113-114). torchtitan's DeepEP is V2's ElasticBuffer, without that map
(pytorch/torchtitan b5bcd76c torchtitan/distributed/deepep/deepep.py:371). HybridEP (DeepEP
hybrid-ep 94a9f8f6 deep_ep/hybrid_ep_buffer.py:74-76) asserts the group a multiple of the ranks it
reaches over NVLink: planner refuses a group that splits unevenly over NVLink domains
(`comms.place`)."""

from __future__ import annotations

from dataclasses import replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms
from planner.model.buffers import DEEPEP_CONFIGS
from planner.search.rules.base import Violation


def flex_group(job: Job, lay: Layout) -> Violation | None:
    """See the module docstring."""
    if not job.arch.is_moe or lay.moe_token_dispatcher_type != "flex":
        return None
    if job.cluster.gpu.vendor != "nvidia":
        return None  # `features.dispatch` refuses the flex dispatcher there
    size = lay.ep * lay.expert_tp
    if size <= 1:
        return None
    field = "parallel.etp" if lay.expert_tp > 1 else "parallel.ep"
    what = f"ep x etp = {lay.ep} x {lay.expert_tp} = {size} ranks"
    backend = lay.moe_flex_dispatcher_backend
    if backend == "deepep" and job.framework == "megatron" and size not in DEEPEP_CONFIGS:
        sizes = ", ".join(map(str, DEEPEP_CONFIGS))
        return Violation(
            "flex_group", field, f"DeepEP has no config for {what} (it asserts the group size in "
            f"{{{sizes}}}: 'Unsupported number of EP ranks')",
        )  # fmt: skip
    if backend != "hybridep":
        return None
    grp = comms.place(job.cluster, 1, size)
    for g in (replace(grp, others=()), *grp.others):
        if g.fewest is not None or size % g.per_domain:
            return Violation(
                "flex_group", field, f"HybridEP needs the group a multiple of the ranks per "
                f"NVLink domain: {what} over domains of {g.per_domain} (its buffer asserts "
                "group_size % ranks_per_nvlink_domain == 0)",
            )  # fmt: skip
    return None


RULES = (flex_group,)
