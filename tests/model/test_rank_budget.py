"""HybridEP's per-rank token budget (`Job.moe_expert_rank_capacity_factor`, Megatron
--moe-expert-rank-capacity-factor) and Megatron's paged stash (`Job.moe_paged_stash`): read from
command lines, written back, emitted, refused where Megatron refuses them, and what they do to
memory (`routing_load.memory_loads`: every expert tensor at the budget's rows, the kept ones in a
stash of 1.1 x the even share with the paged stash) and to the step (`routing_load.step_load`:
copies beyond the budget are dropped).

Oracles: Megatron-LM d98e8a64 (token_dispatcher.py `_HybridEPManager.setup_metadata`: the
dispatch holds int(tokens x top_k x c) rows; paged_stash.py `allocate_stash_buffers`: the stash is
the factor x the average-based maxima, negative factors the actual ones; transformer_config.py
`__post_init__`: the refusals), the MLPerf Training v6.0 gpt-oss-20b submissions (benchmarks/data/
mlperf/runs.yaml: every one trained, so each must be judged to fit with the budget its config
set), and hand arithmetic.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
import yaml
from paths import REPO

from planner.cli import explain_notes
from planner.emit import megatron
from planner.emit.launch import render
from planner.inputs import megatron_args, plan_writer
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan, reframe
from planner.model import memory, moe_activations, routing_load, stage_activations
from planner.search.rules import violations

# Qwen3-30B-A3B-like: 48 layers of 128 experts (top 8) of 768 on 8 B200, HybridEP at ep 8 with the
# fused grouped MLP (Megatron needs it, or grouped tensors, for the budget), forced balance
LINE = (
    "--num-layers 48 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 4 "
    "--group-query-attention --seq-length 4096 --max-position-embeddings 4096 "
    "--micro-batch-size 1 --global-batch-size 64 --vocab-size 151936 --bf16 --num-experts 128 "
    "--moe-router-topk 8 --moe-ffn-hidden-size 768 --expert-model-parallel-size 8 "
    "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep --moe-grouped-gemm "
    "--swiglu --transformer-impl transformer_engine --use-transformer-engine-op-fuser "
    "--moe-mlp-glu-interleave-size 32 --moe-router-force-load-balancing --use-distributed-optimizer"
)


def _plan(extra: str = ""):  # type: ignore[no-untyped-def]
    return parse_plan(megatron_args.to_plan(f"{LINE} {extra}", "b200-sxm-180gb", 8))


def test_the_loads_by_hand() -> None:
    plan = _plan()
    job, lay = plan.job, plan.require_layout()
    dropless = routing_load.memory_load(job, lay)
    assert routing_load.memory_loads(job, lay) == (dropless, dropless)
    budget = replace(job, moe_expert_rank_capacity_factor=2.0)
    # every expert tensor has the budget's rows, kept or running
    assert routing_load.memory_loads(budget, lay) == (2.0, 2.0)
    # the stash keeps 1.1 x the even share (forced balance stays under it: 1 + 7 spreads of a
    # few percent), the running layer the budget's rows
    assert dropless < 1.1
    stash = replace(budget, moe_paged_stash=True)
    assert routing_load.memory_loads(stash, lay) == pytest.approx((1.1, 2.0))
    # a negative factor sizes on the actual maxima, at most the budget: -0.6 x 2 = 1.2
    actual = replace(stash, moe_paged_stash_buffer_size_factor=-0.6)
    assert routing_load.memory_loads(actual, lay) == pytest.approx((1.2, 2.0))
    # learned routing: a step that overflows the stash reruns dropless, at the planning load
    learned = replace(stash, moe_router_force_load_balancing=False)
    assert routing_load.memory_loads(learned, lay) == pytest.approx((1.2, 2.0))
    # only HybridEP reads the budget
    nccl = lay.with_(moe_token_dispatcher_type="alltoall")
    assert routing_load.memory_loads(budget, nccl) == routing_load.memory_loads(job, nccl)


def test_the_step_drops_copies_beyond_the_budget() -> None:
    plan = _plan()
    job, lay = plan.job, plan.require_layout()
    learned = replace(job, moe_router_force_load_balancing=False)
    load = routing_load.step_load(learned, lay)
    assert load > 1.05  # 8 ranks of 16 experts: the busiest waits longer than the even share
    assert routing_load.step_load(replace(learned, moe_expert_rank_capacity_factor=1.0), lay) == 1.0
    assert routing_load.step_load(replace(learned, moe_expert_rank_capacity_factor=2.0), lay) == (
        pytest.approx(load)
    )


def test_memory_follows_the_loads() -> None:
    plan = _plan("--moe-expert-rank-capacity-factor 2")
    job, lay = plan.job, plan.require_layout()
    sh = stage_activations.shard(job, lay)
    assert (sh.moe_load, sh.moe_work_load) == (2.0, None)
    # an MoE layer keeps its routed pairs at the budget: k x T x 2 of them
    assert moe_activations.pairs(job.arch, sh) == 8 * 4096 * 2.0
    peaks = {c: memory.estimate(replace(job, moe_expert_rank_capacity_factor=c), lay).peak
             for c in (1.5, 2.0, 2.5)}  # fmt: skip
    # the kept and running expert tensors grow linearly with the budget's rows
    assert peaks[2.0] - peaks[1.5] == pytest.approx(peaks[2.5] - peaks[2.0], rel=1e-9)
    assert peaks[2.0] > peaks[1.5]
    # the stash keeps every layer's at 1.1, the running one at the budget: less than without
    stash = replace(job, moe_paged_stash=True)
    st = stage_activations.shard(stash, lay)
    assert (st.moe_load, st.moe_work_load) == pytest.approx((1.1, 2.0))
    assert memory.estimate(stash, lay).peak < peaks[2.0]


def test_read_written_back_and_emitted() -> None:
    plan = _plan(
        "--moe-expert-rank-capacity-factor 1.5 --moe-paged-stash "
        "--moe-paged-stash-buffer-size-factor-cuda 1.2"
    )
    job, lay = plan.job, plan.require_layout()
    assert job.moe_expert_rank_capacity_factor == 1.5 and job.moe_paged_stash
    assert job.moe_paged_stash_buffer_size_factor == 1.2
    assert violations(job, lay) == []
    text = plan_writer.render(job, lay, {"name": "moe"}, [])
    for line in (
        "moe_expert_rank_capacity_factor = 1.5",
        "moe_paged_stash = true",
        "moe_paged_stash_buffer_size_factor = 1.2",
    ):
        assert line in text
    args = [a for g in megatron.arguments(plan).model for a in g]
    assert args[args.index("--moe-expert-rank-capacity-factor") + 1] == "1.5"
    assert "--moe-paged-stash" in args
    assert args[args.index("--moe-paged-stash-buffer-size-factor-cuda") + 1] == "1.2"
    bridge = yaml.safe_load(render(plan, "megatron-bridge")[1])["model"]
    assert bridge["moe_expert_rank_capacity_factor"] == 1.5 and bridge["moe_paged_stash"] is True
    assert bridge["moe_paged_stash_buffer_size_factor_cuda"] == 1.2


def test_refused_where_megatron_refuses() -> None:
    plan = _plan("--moe-expert-rank-capacity-factor 1.5 --moe-paged-stash")
    job, lay = plan.job, plan.require_layout()

    def fields(j=job, **change: object) -> list[str]:  # type: ignore[no-untyped-def]
        return [v.field for v in violations(j, lay.with_(**change))]

    budget, stash = "training.moe_expert_rank_capacity_factor", "training.moe_paged_stash"
    assert budget in fields(moe_flex_dispatcher_backend="deepep")
    assert stash in fields(replace(job, moe_expert_rank_capacity_factor=None))
    assert stash in fields(offload_modules=("moe_act",))
    assert stash not in fields(offload_modules=("core_attn",))
    zero = replace(job, moe_paged_stash_buffer_size_factor=0.0)
    assert "training.moe_paged_stash_buffer_size_factor" in fields(zero)
    # torchtitan runs DeepEP dropless, with no budget (its first refusal is reported: FSDP2
    # overlaps its traffic, as said here)
    titan = reframe(job, "torchtitan")
    overlapped = {"overlap_grad_reduce": True, "overlap_param_gather": True}
    assert budget in fields(titan, moe_flex_dispatcher_backend="deepep", **overlapped)


def test_the_mlperf_gpt_oss_runs_fit_with_the_budgets_they_set() -> None:
    # MLPerf Training v6.0 gpt-oss-20b, one B300 node at 3 sequences a micro-batch (five
    # submitters, each with a budget of 1.5) and one B200 node at 2 (two, each with 1.2): they
    # trained, so each must be judged to fit with its budget
    sys.path.insert(0, str(REPO / "benchmarks"))
    import mlperf

    rows = [
        c for c in mlperf.load_mlperf() if "gptoss20b-b300-8" in c.id or "gptoss20b-b200" in c.id
    ]
    budgets = {c.id: c.job.moe_expert_rank_capacity_factor for c in rows}
    assert len(rows) == 7 and set(budgets.values()) == {1.5, 1.2}
    for c in rows:
        assert memory.estimate(c.job, c.layout).fits, c.id


def test_explain_says_which_load_memory_holds() -> None:
    plan = _plan("--moe-expert-rank-capacity-factor 2")
    job, lay = plan.job, plan.require_layout()
    text = explain_notes.routing_text(job, lay)
    assert text is not None
    assert "HybridEP's budget 2 drops beyond it" in text and "2.00x in memory (the budget's" in text
    stash = explain_notes.routing_text(replace(job, moe_paged_stash=True), lay)
    assert stash is not None and "1.10x in memory (the paged stash's" in stash
    assert "holds 2.00x, the budget's" in stash
    learned = replace(job, moe_paged_stash=True, moe_router_force_load_balancing=False)
    rerun = explain_notes.routing_text(learned, lay)
    assert rerun is not None and "1.20x in memory (the dropless load a step that overflows" in rerun
    # a budget under the busiest rank's expected load: what it drops there, 1 - budget / load
    learned_tight = replace(job, moe_router_force_load_balancing=False)
    load = routing_load.step_load(learned_tight, lay)
    tight = replace(learned_tight, moe_expert_rank_capacity_factor=1.0)
    drops = explain_notes.routing_text(tight, lay)
    assert drops is not None and f"about {1 - 1.0 / load:.0%} of that rank's copies" in drops
    assert "of that rank's copies" not in text  # budget 2 drops nothing expected
    # with the stash under that budget a rerun holds the dropless load, not the budget's
    rerun_tight = explain_notes.routing_text(replace(tight, moe_paged_stash=True), lay)
    assert rerun_tight is not None and "holds 1.20x, the rerun's" in rerun_tight
    # without a budget: the dropless bound alone, no budget said
    bare = explain_notes.routing_text(replace(job, moe_expert_rank_capacity_factor=None), lay)
    assert bare is not None and "budget" not in bare


def test_hybridep_budgets_need_the_grouped_experts() -> None:
    """Megatron-Core's TransformerConfig (d98e8a64, __post_init__) raises for a rank capacity
    factor on HybridEP unless the experts run as Transformer Engine's fused grouped MLP
    (--use-transformer-engine-op-fuser) or hold their weights as its grouped tensor
    (--moe-use-grouped-tensor): planner refused neither. The flag is read, written back and
    emitted; Megatron-Bridge's Megatron-Core (2a75ac12) has no grouped tensor: that target
    refuses it by name."""
    plan = _plan("--moe-expert-rank-capacity-factor 1.5")
    job, lay = plan.job, plan.require_layout()
    budget = "training.moe_expert_rank_capacity_factor"
    bare = replace(job, moe_fused_grouped_mlp=False, moe_grouped_tensor=False)
    assert budget in [v.field for v in violations(bare, lay)]
    assert violations(replace(bare, moe_fused_grouped_mlp=True), lay) == []
    grouped = _plan("--moe-expert-rank-capacity-factor 1.5 --moe-use-grouped-tensor")
    assert grouped.job.moe_grouped_tensor
    gj = replace(grouped.job, moe_fused_grouped_mlp=False)
    assert violations(gj, lay) == []
    assert "--moe-use-grouped-tensor" in megatron.arguments(replace(grouped, job=gj)).flat()
    with pytest.raises(InputError, match=r"training\.moe_grouped_tensor"):
        render(replace(grouped, job=gj), "megatron-bridge")


@pytest.mark.parametrize(
    ("flag", "value", "least"),
    [
        # the budget's int(tokens x top_k x c) rows: 4096 x 8 x 1e6 of 2048 wide, 2 bytes, 134 TB
        ("--moe-expert-rank-capacity-factor", "1e305", 1.3e14),
        # the stash at 1e6 x the even share: 4096 x 8 routed copies keep at least their 2048-wide
        # bf16 input, 134 MB a layer, so past 1e6 x 67 MB however the layers share it
        (
            "--moe-expert-rank-capacity-factor 1.5 --moe-paged-stash "
            "--moe-paged-stash-buffer-size-factor-cuda",
            "1e308",
            6.7e13,
        ),
        # token dropping caps the experts' tokens, pads nothing: the dropless run's memory
        ("--moe-expert-capacity-factor", "1e305", 0.0),
    ],
)
def test_absurd_factors_are_refused_and_the_largest_counts_finitely(
    flag: str, value: str, least: float
) -> None:
    """A factor of 1e305 overflowed the byte counts to inf - inf, and the NaN working set read as
    none: `check` said "fits" at the peak of factor 1.5. Above plan_sections.MAX_CAPACITY_FACTOR
    (1e6) the plan is refused naming the field; at 1e6 the memory is counted, finitely (`least`:
    hand arithmetic)."""
    with pytest.raises(InputError, match=r"factor.*less than or equal to 1000000"):
        _plan(f"{flag} {value}")
    plan = _plan(f"{flag} 1e6")
    peak = memory.estimate(plan.job, plan.require_layout()).peak
    assert least < peak < float("inf")
