"""What `planner check` proposes for a layout that fits in GPU memory but offloads more than its
host memory holds (planner.search.host_advice), and that GPU memory's changes count the host.

Oracles: hand arithmetic on Llama 3.1 8B's offloaded layers (each 8192-token micro-batch's layer
is 1.125 GiB on the host: 24 of them 27 GiB, tests/model/test_host_memory.py), and brute force
over the knob each change turns (every layer count, every hundredth of a fraction), judged by
the host and GPU models themselves.

Every plan here also pins its share of each checkpoint save (planner.model.host_checkpoint:
ZeRO 1 under Megatron stages its tensors pinned, whatever it offloads): 8.03e9 / 8 parameters a
GPU at tp 1, each 2 B of bf16 weights and 12 B of fp32 master and moments (checkpoint_size),
13.1 GiB, and each pinned block rounded up to a power of two (host_pinned: the weights' blocks
x 1.137, the optimizer state's pieces x 1.203 on this layout), 15.6 GiB. The hosts below are
the budgets the offloads were written against plus that staging (`_staging`: the model's own
figure, `HostMemory.checkpoint`, held to the hand bounds above), so that the activations have
the usable GiB each test names."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run
from jobs import job
from plan_text import offload_plan

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.units import GIB
from planner.model import cost, host_memory, memory
from planner.search import advice, host_advice


def _host(gib_per_gpu: float, **kw: object) -> Job:
    """Llama 3.1 8B on 8 H100 at 8192 tokens, a node's host memory `gib_per_gpu` x 8."""
    base = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64, **kw)
    node = {"host_memory_gib_per_node": 8 * gib_per_gpu}
    return replace(base, cluster=base.cluster.model_copy(update=node))


LAYERS = Layout(tp=1, pp=1, dp=8, zero_stage=1, cpu_offloading_num_layers=24)
PARAMS = 8_030_261_248  # Llama 3.1 8B's parameters (the catalog's count)


def _staging(job: Job, layout: Layout) -> float:
    """GiB a GPU pins to stage a checkpoint save (`HostMemory.checkpoint`), held to the module
    docstring's hand bounds on a tp 1 dp 8 ZeRO-1 layout with the optimizer on the GPU: at least
    14 B a parameter over 8 GPUs (unrounded), under twice that (a pinned block is under twice
    its bytes)."""
    staged = host_memory.estimate(job, layout).checkpoint
    if (layout.tp, layout.dp, job.optimizer_offload_fraction) == (1, 8, 0.0):
        assert 14 * PARAMS / 8 <= staged < 2 * 14 * PARAMS / 8
    return staged / GIB


STAGED = _staging(_host(48), LAYERS)  # 15.6 GiB (the module docstring)


def _fits_both(c: advice.Change, job: Job) -> bool:
    j = c.job or job
    return memory.estimate(j, c.layout).fits and host_memory.estimate(j, c.layout).fits


def test_fewer_layers_is_the_most_that_fits_the_host_and_is_judged_on_the_gpu() -> None:
    # 48 GiB a GPU and the staging, 16 usable besides it; 24 layers pin 24 x 1.125 = 27 GiB.
    # 14 layers (15.75 GiB) is the most that fits; the 10 layers back on the GPU (+11.25 GiB on
    # 74.0) overflow its 77.3. cp 2 dp 4 stages as much (the same 8 GPUs share the checkpoint)
    job48 = _host(48 + STAGED)
    assert memory.estimate(job48, LAYERS).fits and not host_memory.estimate(job48, LAYERS).fits
    per_layer = host_memory.estimate(job48, LAYERS).activations / 24
    assert per_layer / GIB == pytest.approx(1.125, rel=0.01)
    changes = host_advice.host_changes(job48, LAYERS)
    (fewer,) = [c for c in changes if c.field == "cpu_offloading_num_layers"]
    fitting = [
        n
        for n in range(24)
        if host_memory.estimate(job48, LAYERS.with_(cpu_offloading_num_layers=n)).fits
    ]
    assert fewer.after == max(fitting) == 14 and fewer.memory == "host"
    assert fewer.saves == pytest.approx(10 * per_layer)
    assert not fewer.fits  # the GPU's 74.0 + 11.25 GiB
    # context parallelism halves each layer's tokens: 13.5 GiB, and the GPU's share shrinks too
    (cp,) = [c for c in changes if c.field == "cp"]
    assert _staging(job48, cp.layout) == pytest.approx(STAGED, rel=1e-9)
    assert cp.fits and cp.after == 2 and _fits_both(cp, job48)
    assert changes[0].fits  # those that fit come first


def test_where_no_single_change_fits_a_gpu_change_is_paired_with_offloading_less() -> None:
    # 35 GiB a GPU and the least staging of any layout a change leads to, 3 usable besides it:
    # even cp 8's or tp 8's 27 / 8 = 3.4 GiB is over, so no single change fits both; each GPU
    # change with the fewest layers that then fit the GPU does (the fastest step: the brute
    # force over every layer count of the changed layout, judged by the models). The staging
    # differs by layout only in its blocks' round-up: tp 8 dp 1's (whole weights, pieces over
    # one rank) is the least of the tp / cp ones, 0.75 GiB under tp 1's; ZeRO 2 / 3 stage
    # nothing (Megatron-FSDP's synchronous save, host_checkpoint), but leave 27 GiB offloaded
    tp8 = LAYERS.with_(tp=8, dp=1, sequence_parallel=True)
    least = min(_staging(_host(35), lay) for lay in (LAYERS, LAYERS.with_(cp=8, dp=1), tp8))
    assert least == _staging(_host(35), tp8) < STAGED
    job35 = _host(35 + least)
    changes = host_advice.host_changes(job35, LAYERS)
    singles = [c for c in changes if not c.also or c.field != "cpu_offloading_num_layers"]
    assert singles and not any(c.fits for c in singles)
    paired = [c for c in changes if c.fits]
    assert paired and all(c.field == "cpu_offloading_num_layers" and c.also for c in paired)
    assert all(_fits_both(c, job35) for c in paired)
    for c in paired:
        counts = [c.layout.with_(cpu_offloading_num_layers=n) for n in range(24)]
        fitting = [n for n, lay in enumerate(counts) if _fits_both(replace(c, layout=lay), job35)]
        steps = {n: cost.estimate(job35, counts[n]).step_time_s for n in fitting}
        assert c.after == min(fitting) and steps[min(fitting)] == min(steps.values())
    # the tp change names the dp it takes its factor from: the plan's dp changes with it; and,
    # from tp 1, the sequence parallelism the plan file turns on with any tp > 1
    assert "tp 1 -> 2 + dp 8 -> 4 + sequence_parallel" in {c.also for c in paired}


def test_the_optimizer_and_fine_grained_shares_are_the_fastest_hundredth_that_fits() -> None:
    # a share x of the optimizer on the host, per parameter of the GPU's 8.03e9 / 8: its 16 B,
    # 8 of them in the two pinned fp32 blocks a piece, which round up x 1.203 (host_pinned):
    # 16 + 8 x 0.203 = 17.63 x B; and the checkpoint staging of what the host does not already
    # hold (host_checkpoint): 2 B x 1.137 of weights + 12 B x 1.203 x (1 - x) of state (the
    # module docstring). Together 16.71 + 3.19 x B, 15.63 + 2.98 x GiB (the model's: `_staging`
    # at x 0, `HostMemory.total` at 1, 18.60 GiB). With 17 usable (49 GiB a GPU), every x up to
    # (17 - 15.63) / 2.98 = 0.46 fits the host and none over it, the whole optimizer included;
    # the GPU holds all of it (recompute full), so every hundredth up to 0.46 fits both, and the
    # fastest is a few hundredths: their CPU update overlaps the GPU's on the rest
    job49 = _host(49, optimizer_offload_fraction=1.0)
    lay = Layout(tp=1, pp=1, dp=8, zero_stage=1, recompute="full")
    assert memory.estimate(job49, lay).fits and not host_memory.estimate(job49, lay).fits
    none = _staging(replace(job49, optimizer_offload_fraction=0.0), lay)
    whole = host_memory.estimate(job49, lay)
    assert 16 * PARAMS / 8 < whole.optimizer < 24 * PARAMS / 8  # a block under twice its bytes
    slope = whole.total / GIB - none  # the host's GiB are linear in x
    assert (17 - none) / slope == pytest.approx(0.46, abs=0.005)

    def step(j: Job, new: Layout) -> float:
        return cost.estimate(j, new).step_time_s

    changes = host_advice.host_changes(job49, lay, cost=step)
    (opt,) = [c for c in changes if c.field == "training.optimizer_offload_fraction"]
    assert opt.job is not None and opt.before == 1.0 and opt.fits and not opt.also

    def opt_job(x: float) -> Job:
        return replace(job49, optimizer_offload_fraction=x)

    # brute force: every hundredth that fits both, the fastest by the step-time model
    fitting = [i / 100 for i in range(100) if _fits_both(replace(opt, job=opt_job(i / 100)), job49)]
    assert fitting == [i / 100 for i in range(47)]  # (17 - 15.63) / 2.98 = 0.46
    best = min(fitting, key=lambda x: step(opt_job(x), lay))
    assert opt.after == best == 0.02
    # with no step-time model, the least on the host
    (least,) = [
        c
        for c in host_advice.host_changes(job49, lay)
        if c.field == "training.optimizer_offload_fraction"
    ]
    assert least.after == 0.0
    # fine-grained offloading of every module at fraction 1, a layout over the GPU too: no
    # share of the groups fits the host, whose pinned copies are the first step's, every group
    # copied whatever the fraction (Megatron-LM d98e8a64 fine_grained_activation_offload.py
    # :1211-1212, the fraction set after that step, :650-668; the pool keeps its tensors,
    # :241-244, :347-359): no fraction is offered. (Before: the largest hundredth that fit
    # the host, its steady step's copies.)
    modules = Layout(
        tp=1, pp=1, dp=8, zero_stage=1, offload_modules=("attn_norm", "qkv_linear", "core_attn")
    )
    job33 = _host(33 + _staging(_host(33), modules))  # 1 GiB usable besides the staging
    assert host_memory.estimate(job33, modules).activations > 1 * GIB
    changes = host_advice.host_changes(job33, modules)
    assert not [c for c in changes if c.field == "activation_offload_fraction"]
    least = modules.with_(activation_offload_fraction=0.01)
    assert not host_memory.estimate(job33, least).fits
    dropped = [c for c in changes if c.field == "offload_modules"]
    assert all(host_memory.estimate(job33, c.layout).fits for c in dropped)


def test_a_gpu_memory_change_that_leaves_the_host_over_does_not_make_it_fit() -> None:
    # micro-batch 2 overflows the GPU; halving it fits the GPU, but 24 layers still pin 27 GiB
    # of 8 usable: no change advice.memory_changes lists may say it makes the layout fit
    job40 = _host(40)
    big = LAYERS.with_(micro_batch_size=2)
    assert not memory.estimate(job40, big).fits
    changes = advice.memory_changes(job40, big)
    halve = [c for c in changes if c.field == "micro_batch_size"]
    assert halve and memory.estimate(job40, halve[0].layout).fits and not halve[0].fits
    assert all(_fits_both(c, job40) for c in changes if c.fits)


def test_check_lists_the_changes_for_host_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = offload_plan(tmp_path, 8 * (48 + STAGED), 24)  # 16 GiB usable besides the staging
    code, out, _ = run(["check", str(plan)], capsys)
    assert (
        code == 1 and "Changes that make it fit" in out and "cp 1 -> 2 (+ dp 8 -> 4) saves" in out
    )
    assert "of host memory" in out
    code, out, _ = run(["check", str(plan), "--json"], capsys)
    changes = json.loads(out)["changes"]
    assert code == 1 and {c["memory"] for c in changes} == {"host"}
    assert any(c["change"] == "cp 1 -> 2 (+ dp 8 -> 4)" and c["fits"] for c in changes)
