"""Feasibility rules: what Megatron-LM validates, as pure predicates over (job, layout).

Each rule returns a `Violation` (the plan field it concerns and a Megatron-style message printing
both values) or nothing: `parallel` holds the rules on degrees, pipeline split and batch,
`context` those on context parallelism, `features` those on recompute, offloading, MoE dispatch
and routing, FP8 and the expert overlap, and what Megatron only warns about; `optimizer` those of
Muon and the CPU-offloaded optimizer; `fused_mlp` those of the experts' fused grouped MLP;
`shared_overlap` those of the shared experts' overlap; `selective_policy` that Megatron-LM's
selective recompute has no per-op policy; `p2p_overlap` the interleaved
schedule's without its p2p overlap; `flex_settings` the flex dispatcher's SM
count, HybridEP's budget and the paged stash; `save_original` where Transformer Engine refuses
Megatron's save_original_input; `hybrid` those of a hybrid Mamba stack; `gdn` those
of gated delta nets; `dsa` those of DeepSeek sparse attention;
`torch_fsdp2` those of Megatron-LM's torch FSDP2; `fsdp_pool` Megatron-FSDP's double buffer on a
model chunk without units; `torchtitan` what torchtitan runs (plans
with framework = "torchtitan"). `violations` runs every
rule (the search uses it to prune and to count rejections per rule); `check_plan` turns a plan's
into one InputError; `warnings` lists what Megatron would warn about, which commands report
without refusing.
"""

from __future__ import annotations

from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, Plan
from planner.search.rules.base import Rule, Violation
from planner.search.rules.context import (
    attention_sinks,
    context,
    context_attention,
    context_exchange,
    flash2_head_dims,
)
from planner.search.rules.dsa import JOB_RULES as DSA_JOB_RULES
from planner.search.rules.dsa import RULES as DSA_RULES
from planner.search.rules.dsa import STRUCTURAL_RULES as DSA_STRUCTURAL
from planner.search.rules.feature_warnings import WARNINGS
from planner.search.rules.features import RULES as FEATURE_RULES
from planner.search.rules.features import expert_overlap as feature_expert_overlap
from planner.search.rules.features import flex_runs, recompute_allows_overlap
from planner.search.rules.flex_groups import flex_group
from planner.search.rules.flex_settings import RULES as FLEX_SETTINGS_RULES
from planner.search.rules.fsdp_pool import fsdp_pool
from planner.search.rules.fused_mlp import RULES as FUSED_MLP_RULES
from planner.search.rules.fused_mlp import fused_mlp_etp
from planner.search.rules.gdn import RULES as GDN_RULES
from planner.search.rules.gdn import STRUCTURAL_RULES as GDN_STRUCTURAL
from planner.search.rules.graphs import modules_rule as graph_modules_rule
from planner.search.rules.graphs import rule as graphs_rule
from planner.search.rules.hybrid import RULES as HYBRID_RULES
from planner.search.rules.hybrid import STRUCTURAL_RULES as HYBRID_STRUCTURAL
from planner.search.rules.hybrid import expert_overlap as hybrid_expert_overlap
from planner.search.rules.optimizer import muon, optimizer_offload
from planner.search.rules.p2p_overlap import blocking_pipeline
from planner.search.rules.parallel import (
    batch,
    deterministic,
    experts,
    heads,
    optimizer_instances,
    outer_dp_sharding,
    overlap,
    pipeline_split,
    positions,
    query_groups,
    sequence_parallel,
    sequence_split,
    sm_margin,
    vpp,
    weight_hash,
    world,
)
from planner.search.rules.pools import pools
from planner.search.rules.precision import RULES as PRECISION_RULES
from planner.search.rules.precision import bf16_values, tp_overlap_runs
from planner.search.rules.rank_order import tp_pp_dp_order
from planner.search.rules.save_original import RULES as SAVE_ORIGINAL_RULES
from planner.search.rules.selective_policy import per_op as per_op_selective
from planner.search.rules.shared_overlap import RULES as SHARED_OVERLAP_RULES
from planner.search.rules.t5 import t5_scope
from planner.search.rules.torch_fsdp2 import torch_fsdp2
from planner.search.rules.torchtitan import RULES as TORCHTITAN_RULES
from planner.search.rules.torchtitan import deepep_spread, shard_degree
from planner.search.rules.torchtitan import experts as torchtitan_experts
from planner.search.rules.torchtitan_era import head_era
from planner.search.rules.torchtitan_mtp import mtp_degrees, mtp_job
from planner.search.rules.torchtitan_tied import tied_pipeline as torchtitan_tied

__all__ = [
    "RULES",
    "STRUCTURAL_RULES",
    "Rule",
    "Violation",
    "bf16_values",
    "check_plan",
    "deepep_spread",
    "expert_overlap",
    "flex_group",
    "flex_runs",
    "head_era",
    "job_violations",
    "recompute_allows_overlap",
    "shard_degree",
    "tp_overlap_runs",
    "violations",
    "warnings",
]

RULES: tuple[Rule, ...] = (
    world,
    pools,
    heads,
    query_groups,
    pipeline_split,
    vpp,
    blocking_pipeline,
    experts,
    tp_pp_dp_order,
    torch_fsdp2,
    fsdp_pool,
    context,
    context_attention,
    context_exchange,
    attention_sinks,
    flash2_head_dims,
    sm_margin,
    t5_scope,
    sequence_parallel,
    sequence_split,
    overlap,
    optimizer_instances,
    outer_dp_sharding,
    muon,
    optimizer_offload,
    weight_hash,
    deterministic,
    *FEATURE_RULES,
    per_op_selective,
    graph_modules_rule,
    graphs_rule,
    *FUSED_MLP_RULES,
    *SHARED_OVERLAP_RULES,
    *FLEX_SETTINGS_RULES,
    *TORCHTITAN_RULES,
    *HYBRID_RULES,
    *GDN_RULES,
    *DSA_RULES,
    *PRECISION_RULES,
    *SAVE_ORIGINAL_RULES,
    batch,
    positions,
)

JOB_RULES: tuple[Rule, ...] = (
    attention_sinks,
    flash2_head_dims,
    graph_modules_rule,
    deterministic,
    positions,
    sm_margin,
    mtp_job,
    *DSA_JOB_RULES,
)
"""The rules that depend on the job alone: one broken refuses every layout (`job_violations`)."""


STRUCTURAL_RULES: tuple[Rule, ...] = (
    heads,
    sequence_split,
    query_groups,
    experts,
    torchtitan_experts,
    head_era,
    mtp_degrees,
    torchtitan_tied,
    context,
    context_attention,
    context_exchange,
    t5_scope,
    optimizer_instances,
    fused_mlp_etp,
    *JOB_RULES,
    *HYBRID_STRUCTURAL,
    *GDN_STRUCTURAL,
    *DSA_STRUCTURAL,
    batch,
)
"""The rules that depend only on the parallel degrees (with micro_batch_size 1), or on the job
alone (JOB_RULES): the search applies them to whole structures before it chooses
micro-batches, vpp and splits."""


def expert_overlap(job: Job, layout: Layout) -> Violation | None:
    """Whether Megatron refuses the layout's EP all-to-all overlap (`features.expert_overlap`;
    never with a hybrid stack, `hybrid.expert_overlap`): what the search asks before it offers
    the overlap."""
    return hybrid_expert_overlap(job, layout) or feature_expert_overlap(job, layout)


def _broken(rules: tuple[Rule, ...], job: Job, layout: Layout) -> list[Violation]:
    return [v for rule in rules if (v := rule(job, layout)) is not None]


def job_violations(job: Job) -> list[Violation]:
    """The JOB_RULES the job breaks: no layout of it runs (`suggest` says why)."""
    return _broken(JOB_RULES, job, Layout())


def violations(job: Job, layout: Layout) -> list[Violation]:
    """Every rule the layout breaks (empty = Megatron would accept it)."""
    return _broken(RULES, job, layout)


TORCHTITAN_WARNINGS: tuple[Rule, ...] = ()
"""What a torchtitan plan runs that planner does not model, said and not refused (none: the V
schedules' placement, once one, is modelled, `Layout.v_stages`)."""


def warnings(job: Job, layout: Layout) -> list[Violation]:
    """What Megatron would warn about (or its tests never run) in an accepted layout; for a
    torchtitan plan (Megatron's warnings are about Megatron's code) what planner does not model
    of it (`TORCHTITAN_WARNINGS`)."""
    if job.framework == "torchtitan":
        return _broken(TORCHTITAN_WARNINGS, job, layout)
    return _broken(WARNINGS, job, layout)


def check_plan(plan: Plan) -> Plan:
    """The plan, once its layout passes every rule; the broken ones raise one InputError naming
    the file and each field. A plan without `[parallel]` passes unchanged."""
    if plan.layout is None:
        return plan
    found = violations(plan.job, plan.layout)
    if found:
        where = str(plan.path) if plan.path else "<plan>"
        raise InputError("\n".join(f"{where}: {v.field}: {v.message}" for v in found))
    return plan
