"""suggest --framework torchtitan searches torchtitan's own settings beside the layout
(planner.search.titan_variants): reshard_after_forward and HSDP's dp_replicate.

Oracle: the brute force over every (layout, settings) torchtitan accepts on a small problem
(tests/search/titan_brute_force.py: every layout and setting, filtered by planner's rules,
scored by the exact model, sharing none of the search's pruning nor its enumeration). The
problems here are dense or cut MoE models (no torchtitan flavor, so ep 1);
test_titan_variants_ep.py checks expert parallelism and the V schedules."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest
import titan_brute_force as brute
from titan_brute_force import titan_job

from planner.inputs.arch import ModelArch
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan import TorchtitanSection
from planner.model import cost, memory
from planner.search import titan_variants as tv
from planner.search.space import Bound, Space

TOP_K = 6


def cut_model(job: Job, name: str, **fields: object) -> Job:
    """The job with its model cut to a smaller shape under another name (no torchtitan flavor:
    `rules.torchtitan.experts` refuses expert parallelism there, so only the brute force's ep 1
    layouts pass the rules)."""
    arch = ModelArch.model_validate({**job.arch.model_dump(), "name": name, **fields})
    return replace(job, arch=arch)


PROBLEMS: dict[str, tuple[Job, Space]] = {
    # 35 GiB: reshard "never" and "always" and every-N recompute pay off where they fit
    "llama8b-8xh100-35gib": (
        titan_job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 32, memory_gib=35),
        Space(framework="torchtitan", cp=Bound(1, 2), vpp=Bound(1, 2), mbs=Bound(1, 4)),
    ),
    # 23 GiB: "always" fits where "default" does not (its output layer freed after forward)
    "llama8b-8xh100-23gib": (
        titan_job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 32, memory_gib=23),
        Space(framework="torchtitan", cp=Bound(1, 2), vpp=Bound(1, 2), mbs=Bound(1, 4)),
    ),
    # eight nodes: HSDP's replicas across the slower link (r = 2 there by a hair, +16 GiB); at
    # 90.5 GiB "always" fits tp 2's per-op recompute (87.4 GiB usable) where "default" does not
    # (88.0: per-op keeps each layer's two reduce-scatter outputs, 80 x 2 x 4096 x 8192 x 2 B)
    "llama70b-64xh100": (
        titan_job("llama3.1-70b", "h100-sxm-80gb", 64, 8192, 64, memory_gib=90.5),
        Space(
            framework="torchtitan",
            pp=Bound(1, 2),
            cp=Bound(1, 1),
            vpp=Bound(1, 1),
            mbs=Bound(1, 2),
        ),
    ),
    # QA: HSDP's replicas over a shard group of one (dp_replicate = dp, ZeRO 0) beside TP: r 4
    # at tp 2 dp 4 ranks 6th (0.1755 s); the search built it at ZeRO 3, which the rule refuses
    "qwen3-l8e16-8xh100-40gib": (
        cut_model(
            titan_job("qwen3-30b-a3b", "h100-sxm-80gb", 8, 4096, 16, memory_gib=40),
            "qwen3-l8e16",
            num_layers=8,
            num_moe_experts=16,
        ),
        Space(
            framework="torchtitan", cp=Bound(1, 1), vpp=Bound(1, 2), mbs=Bound(1, 2), tp=Bound(1, 2)
        ),
    ),
    # QA: the same beside pipelining, 6 layers of DeepSeek-V2-Lite's shape (r 4 at pp 2 dp 4
    # vpp 2 ranks 5th)
    "dsv2-l6e16-8xh100-30gib": (
        cut_model(
            titan_job("deepseek-v2-lite", "h100-sxm-80gb", 8, 4096, 16, memory_gib=30),
            "dsv2-l6e16",
            num_layers=6,
            num_moe_experts=16,
            moe_layer_freq=[0, 1, 1, 1, 1, 1],
        ),
        Space(framework="torchtitan", cp=Bound(1, 1), vpp=Bound(1, 2), mbs=Bound(1, 2)),
    ),
    # QA: every-N memory is not monotone in N: Llama 3.1 70B's shape in 12 layers, LoopedBFS at
    # pp 2 vpp 3 (3 chunks of 2 layers a rank), 12% headroom (79.64 x 0.88 = 70.08 GiB): N 6
    # and 4 wrap a chunk's last layer (its rebuild on the peak: 70.80 GiB, over), N 5 does not
    # (68.74, fits, 1.59992 s) and N 3 fits slower (1.67342 s); a bisection asked 4, then 3
    "llama70b-l12-32xh100-loopedbfs": (
        replace(
            cut_model(
                titan_job("llama3.1-70b", "h100-sxm-80gb", 32, 16384, 16),
                "llama3.1-70b-l12",
                num_layers=12,
            ),
            torchtitan=TorchtitanSection(pipeline_schedule="LoopedBFS"),
        ),
        Space(
            framework="torchtitan",
            tp=Bound(2, 8),
            pp=Bound(2, 2),
            vpp=Bound(2, 3),
            cp=Bound(1, 1),
            mbs=Bound(1, 1),
            headroom_pct=12.0,
        ),
    ),
    # a small batch: global 2 at tp <= 2 leaves dp <= 2 and pp >= 2, so every layout's schedule
    # runs m = 2 / (dp x mbs) < pp micro-batches (torch's looped schedules in one round of m,
    # priced in torch's order, `looped_order`; 1F1B raises): pp 4 vpp 3 (m 2) first, pp 2 (m 1)
    "llama8b-8xh100-gbs2": (
        titan_job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 2, memory_gib=45),
        Space(
            framework="torchtitan", tp=Bound(1, 2), cp=Bound(1, 1), vpp=Bound(1, 3), mbs=Bound(1, 2)
        ),
    ),
    # a 1.7B model replicated whole over the 8 GPUs (dp_replicate 8, shard group 1, no other
    # parallelism: e347b1e5 models/llama3/infra/parallelize.py:148-156 runs DDP) ranks 5th
    "gpt1.7b-8xh100": (
        titan_job("gpt-mcore-1.7b", "h100-sxm-80gb", 8, 4096, 64),
        Space(
            framework="torchtitan", cp=Bound(1, 1), pp=Bound(1, 2), vpp=Bound(1, 2), mbs=Bound(1, 4)
        ),
    ),
}


_bases = brute.bases  # the names other tests import
_every_variant = brute.every_variant
_own_job = brute.own_job


@cache
def reference(name: str) -> brute.Ref:
    """The brute force's top K rows of the problem (`titan_brute_force.reference`)."""
    job, space = PROBLEMS[name]
    return brute.reference(job, space, TOP_K)


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_merged_search_equals_brute_force(name: str) -> None:
    ref = reference(name)
    assert len(ref) == TOP_K
    brute.assert_search_equals(*PROBLEMS[name], ref)


def test_problems_exercise_the_settings() -> None:
    """Somewhere the top K holds "never", "always", HSDP and every-N recompute (so a wrong merge
    would show), and replicas over a shard group of one (dp_replicate = dp at cp 1, ZeRO 0)
    beside TP, beside PP and alone (torchtitan's DDP); and the excluded variants never
    make it: "never" / "always" under PP (the model makes "never" the default there and
    "always" only slower)."""
    seen = []
    shard_one: set[str] = set()
    for name, (job, _) in PROBLEMS.items():
        searched = [v.settings(job.titan) for v in tv.variants(job)]
        for _, row, titan in reference(name):
            seen.append(titan)
            plain = titan.model_copy(update={"selective_layer_every": None})
            assert plain in searched
            lay = row.candidate.layout
            assert lay.pp == 1 or titan.reshard_after_forward == "default"
            if titan.dp_replicate > 1 and lay.dp // titan.dp_replicate * lay.cp == 1:
                assert lay.zero_stage == 0  # rules.torchtitan.sharding
                shard_one.add("tp" if lay.tp > 1 else "pp" if lay.pp > 1 else "alone")
    assert any(t.reshard_after_forward == "never" for t in seen)
    assert any(t.reshard_after_forward == "always" for t in seen)
    assert any(t.dp_replicate > 1 for t in seen)
    assert any(t.selective_layer_every is not None for t in seen)
    assert shard_one == {"tp", "pp", "alone"}


def test_variants_share_the_layer_times_bit_for_bit() -> None:
    """`Variant.job` shares the base job's layer-time memo, and the every-N pass asks memory and
    time of the variant's job rather than of one with selective_layer_every set: for every
    variant of the 70B problem and layouts with and without pipelining, HSDP and every-N
    recompute, what is read through the shared memo (filled by other variants first) and
    under the variant's job is bit for bit what a fresh job with the settings computes."""
    from planner.inputs.titan_every_layers import every_n
    from planner.model.job_memo import JobMemo
    from planner.model.stage_time import LAYER_TIMES, layout_times
    from planner.search.titan_every import every_job

    job, _ = PROBLEMS["llama70b-64xh100"]
    base = Layout(tp=8, pp=2, dp=4, cp=1, etp=8, sequence_parallel=True, zero_stage=3)
    layouts = [
        base,
        base.with_(pp=1, dp=8, recompute="selective"),
        every_n(base.with_(pp=1, dp=8, micro_batch_size=2), 16),
        every_n(base, 8),
    ]
    order = _every_variant(job)
    for v in order:
        for lay in layouts:
            every = lay.recompute_method == "block"
            fresh_job = _own_job(job, v)
            if every:
                fresh_job = every_job(fresh_job, 4)
            JobMemo.forget_all()
            fresh = (
                layout_times(fresh_job, lay),
                cost.estimate(fresh_job, lay).step_time_s,
                memory.estimate(fresh_job, lay).peak,
            )
            JobMemo.forget_all()
            for u in order:  # fill the shared memo under the other variants first
                if u != v:
                    cost.estimate(u.job(job), lay)
            shared = v.job(job)
            assert LAYER_TIMES.of(shared) is LAYER_TIMES.of(job)
            got = (
                layout_times(shared, lay),
                cost.estimate(shared, lay).step_time_s,
                memory.estimate(shared, lay).peak,
            )
            assert got == fresh, (v, lay.describe())
