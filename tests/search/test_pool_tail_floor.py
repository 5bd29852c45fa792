"""The tail lines the pooled search's bounds add after the pipeline (planner/model/tail_floor.py
`tail_lines`, planner/search/pool_tails.py) are never above the exact tail: on seeded random
jobs (one cluster or two pools; dense, MoE, hybrid and MTP models; Megatron and torchtitan;
ZeRO 0 to 3; one or two model chunks; the optimizer CPU-offloaded whole or in part, with bf16
moments, Muon, the precision-aware optimizer, several distributed-optimizer instances, a frozen
model; bf16, fp16, fp8 with its param gathers, MXFP8, fp4 and fp32 training; default and
explicit DDP buckets, the overlaps on and off), each of a random split, every rank's tail
T_r is at least o0 + o1 y_r and at least o0 + o1 y_r + s0 + s1 y_r - k t_r, t_r its stage time
per micro-batch; and the lines the search holds (microseconds, `pool_tails.tail_floor`, on a
layout of even stages) are those lines.

Oracle: the exact model itself, `cost.estimate` of each split (`Performance.tails`, the exposed
sync plus the optimizer step of each rank, and `Performance.stages`).

The lines must bound something: the sync form (what the buckets show beyond the stage's
windows) is above the optimizer's alone on many of these ranks, and within 5% of the exact tail
on the slow links of examples/pools-llama3.1-70b-h100-a100.toml (its best layout's last rank:
342.4 of 355.0 ms). Before these lines the bounds had no tail, or the chords of
`pools.time_lines`, which are above it (tests/search/test_pool_bound_brute.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, load_plan, parse_plan
from planner.model import cost
from planner.model import pools as model_pools
from planner.model.tail_floor import tail_lines
from planner.search import pool_search, pools
from planner.search.pool_plan import pool_layout
from planner.search.pool_tails import tail_floor
from planner.search.rules import violations
from planner.search.solver import PoolSplit

REL = 1e-9  # the model's float sums and the lines' products round differently
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pools-llama3.1-70b-h100-a100.toml"
MODELS = (
    "llama3.1-8b",
    "gemma2-2b",
    "mixtral-8x7b",
    "deepseek-v2-lite",
    "qwen3-30b-a3b",
    "gpt-oss-20b",
    "qwen3-next-80b-a3b",
    "nemotron3-nano-30b-a3b",
)
GPUS = ("h100-sxm-80gb", "a100-sxm-40gb", "l40s-48gb", "h200-sxm-141gb", "b200-sxm-180gb")
TRAINING: tuple[dict[str, object], ...] = (
    {},
    {"optimizer_offload_fraction": 1.0},
    {"optimizer_offload_fraction": 0.5, "optimizer_offload_overlap": True},
    {"optimizer_state_dtype": "bf16"},
    {"precision": "fp32"},
    {"params_dtype": "fp32"},
    {"optimizer": "muon"},
    {"precision": "fp8", "fp8_recipe": "mxfp8", "fp8_param_gather": True},
    {"precision": "fp8", "fp8_param_gather": True},
    {"main_grad_dtype": "bf16"},
    {"use_precision_aware_optimizer": True, "optimizer_state_dtype": "bf16"},
    {"optimizer_instances": 2},
    {"frozen_model": True},
    {"precision": "fp16"},
    {"precision": "fp4"},
)
TITAN = 5  # torchtitan takes the first of TRAINING


def _job(rnd: random.Random, pooled: bool, titan: bool) -> Job:
    training: dict[str, object] = {
        "seq_length": rnd.choice([2048, 4096]),
        "global_batch_size": rnd.choice([16, 32, 64]),
        **rnd.choice(TRAINING[:TITAN] if titan else TRAINING),
    }
    if titan:
        training["framework"] = "torchtitan"
    cluster: dict[str, object]
    if pooled:
        gpus, counts = rnd.sample(GPUS, 2), rnd.choice([(8, 8), (16, 8), (8, 16), (16, 16)])
        named = zip("ab", gpus, counts, strict=True)
        cluster = {
            "pools": [{"name": n, "gpu": g, "num_gpus": c} for n, g, c in named],
            "between_pools": {"bandwidth_gb_per_s_per_gpu": 25.0, "latency_us": 10},
        }
    else:
        cluster = {"gpu": rnd.choice(GPUS), "num_gpus": rnd.choice([16, 32])}
    doc = {"model": {"name": rnd.choice(MODELS)}, "cluster": cluster, "training": training}
    return parse_plan(doc).job


def _split(rnd: random.Random, L: int, pp: int) -> tuple[int, ...]:
    cuts = sorted(rnd.sample(range(1, L), pp - 1))
    ends = (0, *cuts, L)
    return tuple(ends[i + 1] - ends[i] for i in range(pp))


def _case(seed: int) -> tuple[Job, Layout] | None:
    """A random job and split layout (None: the draw breaks a rule or a pool's whole stages)."""
    rnd = random.Random(seed)
    pooled = rnd.random() < 0.6
    titan = not pooled and rnd.random() < 0.5
    try:
        job = _job(rnd, pooled, titan)
    except InputError:  # a setting the job refuses (fp4 on a GPU without it, ...)
        return None
    tp, cp, dp = rnd.choice([1, 2, 4]), rnd.choice([1, 1, 2]), rnd.choice([1, 2, 4])
    gpus, L = tp * cp * dp, job.arch.num_layers
    if job.cluster.num_gpus % gpus or any(p.cluster.num_gpus % gpus for p in job.pools):
        return None
    pp = job.cluster.num_gpus // gpus
    if not 2 <= pp <= L:
        return None
    experts = job.arch.num_moe_experts or 1
    ep = rnd.choice([e for e in (1, 2, 4, 8) if (cp * dp) % e == 0 and experts % e == 0])
    lay = pool_layout(
        job,
        tp,
        cp,
        pp=pp,
        dp=dp,
        ep=ep,
        zero_stage=rnd.choice([0, 3]) if titan else rnd.choice([0, 1, 1, 2, 3]),
        micro_batch_size=rnd.choice([1, 2]),
        tp_comm_overlap=tp > 1 and rnd.random() < 0.3,
        overlap_grad_reduce=rnd.random() < 0.8,
        overlap_param_gather=rnd.random() < 0.8,
        ddp_bucket_size=rnd.choice([None, None, 10_000_000]),
    )
    if job.global_batch_size % (dp * lay.micro_batch_size):
        return None
    ys = _split(rnd, L, pp)
    if pooled:
        order = rnd.choice([(0, 1), (1, 0)])
        stages = model_pools.pool_stages(job, lay)
        ks = tuple(k for k in order for _ in range(stages[k]))
        job, lay = pools.apply(job, lay, PoolSplit(ys, ks, 0, 0, ()))
    else:
        vpp = 1 if titan else rnd.choice([1, 2, 2])
        even = tuple(2 * (y // 2) or 2 for y in ys)  # two chunks: even stages, L in all
        m = job.global_batch_size // (dp * lay.micro_batch_size)
        if vpp > 1 and sum(even) == L and m % pp == 0:
            lay = lay.with_(pipeline_layers=even, vpp=vpp)
        else:
            lay = lay.with_(pipeline_layers=ys)
    return None if violations(job, lay) else (job, lay)


def _forms(job: Job, lay: Layout) -> list[tuple[float, float, float]]:
    """Each rank's (exact tail, first form, second form) in seconds."""
    perf = cost.estimate(job, lay)
    jobs = model_pools.rank_jobs(job, lay) or (job,) * lay.pp
    out = []
    for r, y in enumerate(lay.stage_layers(job.arch.num_layers)):
        o0, o1, s0, s1, k = tail_lines(jobs[r], lay)[r]
        first = o0 + o1 * y
        out.append((perf.tails[r], first, first + s0 + s1 * y - k * sum(perf.stages[r])))
    return out


def test_the_tail_lines_are_below_every_ranks_exact_tail() -> None:
    checked = binding = 0
    kinds: set[tuple[str, int, int, bool]] = set()
    for seed in range(1500):
        case = _case(seed)
        if case is None:
            continue
        job, lay = case
        for tail, first, second in _forms(job, lay):
            assert first <= tail * (1 + REL), (seed, lay.describe(), tail, first)
            assert second <= tail * (1 + REL), (seed, lay.describe(), tail, second)
            binding += second > max(first, 0.0)
        checked += 1
        kinds.add((job.framework, lay.zero_stage, lay.vpp, bool(job.pools)))
    # enough draws of every kind: each framework, ZeRO stage, chunking and cluster
    assert checked > 400 and len(kinds) >= 12
    assert binding > 50  # the sync form binds somewhere


def test_the_searchs_lines_are_the_models_on_every_split() -> None:
    """`pool_tails.tail_floor` (microseconds, on even stages) bounds the exact tail of every
    rank of the example's layouts at random splits, and reaches within 5% of it on the best."""
    job = load_plan(EXAMPLE).job
    rnd = random.Random(7)
    L, tight = job.arch.num_layers, 0.0
    for lay in pool_search.layouts(job)[::7]:
        floor = tail_floor(job, lay)
        stages = model_pools.pool_stages(job, lay)
        for order in ((0, 1), (1, 0)):
            ks = tuple(k for k in order for _ in range(stages[k]))
            ys = _split(rnd, L, lay.pp)
            pj, sl = pools.apply(job, lay, PoolSplit(ys, ks, 0, 0, ()))
            if violations(pj, sl):
                continue
            perf = cost.estimate(pj, sl)
            for (o0, o1, s0, s1, k), y, tail, st in zip(
                floor.order(ks), ys, perf.tails, perf.stages, strict=True
            ):
                bound = max(o0 + o1 * y, o0 + o1 * y + s0 + s1 * y - k * sum(st) * 1e6)
                assert bound <= tail * 1e6, (lay.describe(), ks, ys)
                tight = max(tight, bound / (tail * 1e6))
    assert tight > 0.95


@pytest.mark.parametrize("fraction", [0.0, 1.0])
def test_a_frozen_model_has_no_tail_line(fraction: float) -> None:
    """A frozen model below ZeRO 3 updates and syncs nothing (rank_sync.stage_sync zeroes its
    parameters): every line 0, whatever the offload; a trained one's optimizer line rises."""

    def job(frozen: bool) -> Job:
        training: dict[str, object] = {"seq_length": 4096, "global_batch_size": 32}
        training |= {"frozen_model": frozen, "optimizer_offload_fraction": fraction}
        cluster = {"gpu": "h100-sxm-80gb", "num_gpus": 16}
        return parse_plan(
            {"model": {"name": "llama3.1-8b"}, "cluster": cluster, "training": training}
        ).job

    lay = Layout(tp=2, pp=2, dp=4, sequence_parallel=True)
    assert tail_lines(job(True), lay) == ((0.0, 0.0, 0.0, 0.0, 0.0),) * 2
    assert all(o1 > 0 for _, o1, *_ in tail_lines(job(False), lay))
