"""`planner check`'s offloaded shares raised to fit GPU memory (`advice_offload.raised`), within
the host's memory, and host memory's pairs of a GPU change with offloading less where a single
change fits but slower (`host_advice.host_changes`).

Oracles: the brute force over every hundredth of the share (the plan edited as a user would,
checked as `planner check` checks a plan file, judged by `memory.estimate` /
`host_memory.estimate` and `cost.estimate`: `test_advice_applied`), and over every pair of a
GPU change and a whole-layer count (`test_host_advice`'s plan, judged by the same models)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from jobs import job as catalog_job
from test_advice_applied import checked, doc, fits, plan_changes, step
from test_advice_brute import as_written, the
from test_host_advice import LAYERS, STAGED

from planner.inputs.plan import Job
from planner.inputs.units import GIB
from planner.model import cost, host_memory, memory
from planner.search import host_advice
from planner.search.rules import violations

L40S: dict[str, Any] = {
    "model": {"name": "llama3.1-8b"},
    "cluster": {"gpu": "l40s-48gb", "num_gpus": 4},
    "training": {"seq_length": 4096, "global_batch_size": 64},
    "parallel": {"tp": 2, "micro_batch_size": 1, "zero_stage": 1, "recompute": "none"},
}
"""The QA pass's Llama 3.1 8B on 4 L40S at tp 2 (dp 2), ZeRO 1: `tp 2 -> 4` was the one change
listed, where part of the optimizer on the host fits faster."""

OPT = "training.optimizer_offload_fraction"


def _brute(d: dict[str, Any], key: str, lo: int) -> dict[float, float]:
    """Step by share of every hundredth from `lo` to the whole that fits the GPU and the host."""
    steps = {}
    for i in range(lo, 101):
        q = checked(doc(d, **{key: i / 100}))
        if q is not None and fits(q):
            steps[i / 100] = step(q)
    return steps


def _host_node(d: dict[str, Any], usable: float) -> float:
    """GiB of host memory a node with `usable` GiB a GPU beside the 32 the process keeps
    (`host_memory`) and the plan's checkpoint staging (`HostMemory.checkpoint`)."""
    p = checked(d)
    assert p is not None
    staged = host_memory.estimate(p.job, p.require_layout()).checkpoint / GIB
    return p.job.cluster.gpus_per_node * (32 + staged + usable)


@pytest.mark.parametrize("usable", [None, 2.0], ids=["host default", "host 2 GiB over staging"])
def test_the_optimizer_share_on_the_host_is_the_fastest_hundredth_that_fits(
    usable: float | None,
) -> None:
    """The L40S plan over its GPU by 14 GiB: the listed optimizer share is the brute force's
    fastest hundredth that fits both memories (the least on ties), faster than tp 2 -> 4 (QA's
    23.5 s against 34.9 s). With 2 GiB of host a GPU beside the checkpoint staging and the
    32 GiB the process keeps, no share that fits the host fits the GPU (the host holds less than
    half of the optimizer: each share's fp32 master and moments, pinned, less the staging of
    what the host then holds, `host_checkpoint`): none that fits is listed, only the most the
    host holds, the nearest to fitting."""
    d = doc(L40S)
    if usable is not None:
        d["cluster"]["host_memory_gib_per_node"] = _host_node(L40S, usable)
    base = checked(d)
    assert base is not None and not fits(base)
    steps = _brute(d, "training__optimizer_offload_fraction", 1)
    changes = plan_changes(d)
    opt = the(changes, OPT)
    assert opt.before == 0.0 and opt.job is not None
    if usable is None:
        best = min(steps, key=lambda x: (steps[x], x))
        assert opt.fits and opt.after == best and changes[0] is opt
        assert as_written(d, opt) == pytest.approx(steps[best])
        tp = the(changes, "tp")
        assert tp.fits and as_written(d, tp) > steps[best]
        return
    assert not steps and not opt.fits
    held = [i / 100 for i in range(1, 101)]
    held = [x for x in held if host_memory.estimate(replace(base.job, optimizer_offload_fraction=x),
                                                   base.require_layout()).fits]  # fmt: skip
    assert held and opt.after == max(held)


def test_the_fine_grained_share_is_raised_to_the_fastest_hundredth_that_fits() -> None:
    """Llama 3.1 8B on 8 H100 at tp 2, micro-batch 2, offloading the core attention's and its
    projection's inputs of the first quarter of the layers' groups: over the GPU. The listed
    `activation_offload_fraction` is the brute force's fastest hundredth above 0.25 that fits
    (the least on ties), listed no earlier than the changes whose step is shorter (the list is
    fastest first; ZeRO 2 now is: the attention output copied by both groups doubles its
    share of the host transfers, tests/model/test_offload_attention_output.py)."""
    d = doc(
        doc(L40S, training__seq_length=8192),
        cluster__gpu="h100-sxm-80gb", cluster__num_gpus=8, micro_batch_size=2,
        offload_modules=["core_attn", "attn_proj"], activation_offload_fraction=0.25,
    )  # fmt: skip
    base = checked(d)
    assert base is not None and not fits(base)
    steps = _brute(d, "activation_offload_fraction", 26)
    changes = plan_changes(d)
    share = the(changes, "activation_offload_fraction")
    best = min(steps, key=lambda x: (steps[x], x))
    assert share.fits and share.before == 0.25 and share.after == best
    assert as_written(d, share) == pytest.approx(steps[best])
    before = changes[: changes.index(share)]
    assert all(as_written(d, c) <= as_written(d, share) for c in before)


def _host(gib_per_gpu: float) -> Job:
    """`test_host_advice`'s Llama 3.1 8B on 8 H100 at 8192 tokens, a node's host memory
    `gib_per_gpu` x 8."""
    base = catalog_job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    node = {"host_memory_gib_per_node": 8 * gib_per_gpu}
    return replace(base, cluster=base.cluster.model_copy(update=node))


def _pairs(job: Job) -> dict[str, float]:
    """The brute force over pairs: every GPU change (each higher ZeRO stage, selective or full
    recompute, each tp, cp, pp the 8 GPUs take) with every whole-layer count up to the plan's
    24, the step of each that passes the rules and fits both memories (the plan's own count: a
    single change)."""
    edits: list[dict[str, Any]] = [{"zero_stage": z} for z in (2, 3)]
    edits += [{"recompute": r} for r in ("selective", "full")]
    for knob in ("tp", "cp", "pp"):
        edits += [{knob: k, "dp": 8 // k} for k in (2, 4, 8)]
    out = {}
    for e in edits:
        lay = LAYERS.with_(**e)
        if lay.tp > 1:
            lay = lay.with_(sequence_parallel=True)
        for n in range(25):
            new = lay.with_(cpu_offloading_num_layers=n)
            if violations(job, new) or not memory.estimate(job, new).fits:
                continue
            if host_memory.estimate(job, new).fits:
                out[f"{e} + {n} layers"] = cost.estimate(job, new).step_time_s
    return out


def test_a_pair_faster_than_every_single_change_is_listed() -> None:
    """Llama 3.1 8B on 8 H100 offloading 24 layers, 20 GiB of host a GPU beside the staging
    (24 x 1.125 = 27 GiB pinned: over): tp 8 or cp 8 fit alone, the only single changes that
    do, and pairs were tried only where none did; ZeRO 2 with 3 layers offloaded fits both at
    about a third of tp 8's step. The first change listed is the brute force's fastest pair,
    and faster than every single change that fits."""
    job = _host(52 + STAGED)
    assert not host_memory.estimate(job, LAYERS).fits
    changes = host_advice.host_changes(
        job, LAYERS, cost=lambda j, lay: cost.estimate(j, lay).step_time_s
    )
    fitting = [c for c in changes if c.fits]
    singles = [c for c in fitting if not c.also or c.field != "cpu_offloading_num_layers"]
    pairs = _pairs(job)
    first = fitting[0]
    assert first.field == "cpu_offloading_num_layers" and first.also
    at = cost.estimate(job, first.layout).step_time_s
    assert at == pytest.approx(min(pairs.values()))
    assert singles and all(at < cost.estimate(job, c.layout).step_time_s for c in singles)
