"""torchtitan's gradient accumulation under pipelining: a step of k pipeline schedules
(`[torchtitan] gradient_accumulation_steps`), which `planner.model.cost` and `planner.model.memory`
estimate as k steps of one schedule each whose optimizer runs once.

What torchtitan runs (pytorch/torchtitan, `git show REV:path`):
- e347b1e5 train.py:195-215: global_batch_size (-1: local_batch_size x the batch degree, dp) is
  asserted a multiple of local_batch_size x dp, gradient_accumulation_steps = global / (local x
  dp). train_step (:547-600) takes that many batches of local_batch_size (:561) and runs
  forward_backward_step on each (:577-590), under pipelining one pp_schedule.step of the batch
  (:502-511) over local / pipeline_parallel_microbatch_size micro-batches
  (distributed/pipeline_parallel.py:186-210); then clip_grad_norm_ and optimizers.step once
  (:592-600).
- b5bcd76c trainer.py:409-428: a schedule of num_pp_microbatches micro-batches of
  num_tokens_per_microbatch_per_dp_rank (distributed/pipeline_parallel.py:125-130),
  gradient_accumulation_steps = num_tokens_per_train_step / (those tokens x dp); train_step
  (:842-956) fetches k groups of num_pp_microbatches (:856-861) and runs forward_backward_step on
  each (:880-899), under pipelining one pp_schedule.step (:764, :827); the optimizer once (:956).
- torch.distributed.pipelining (pytorch/pytorch): every backward runs with FSDP's
  set_requires_gradient_sync(False) and set_reshard_after_backward(False) (stage.py
  `backward_maybe_with_nosync`, 01386103), and every schedule's step() ends in its stage's reduce
  step (schedules.py at 00722e64: ScheduleGPipe's and Schedule1F1B's `_step_microbatches` end in
  `self._stage.perform_reduce_grad(...)`; stage.py `_post_backward` at 01386103), which turns both
  back on and runs each FSDP parameter group's post_backward: the gradients reduce-scatter (with
  HSDP, all-reduce) and the parameters reshard at the end of every schedule, and the next
  schedule's first forward gathers them again. A stage's receive buffers are made for its
  schedule's n_microbatches (stage.py `_prepare_forward_infra`).

So each schedule is what planner models as a step of one schedule (`planner.model.fsdp2`: one
all-gather and one reduce-scatter per stage, its own fill and drain, its own micro-batches in
flight and receive buffers): `sub_job`, the job at global_batch_size / k and k = 1. Memory is the
sub-job's (nothing of a schedule outlives it but the sharded fp32 gradients FSDP2 adds each
reduce-scatter into, which the sub-job counts). Step time (`accumulate`): every StepBreakdown field
of the sub-step x k but the optimizer and `other`, once a step: `other` is the step's fixed host
time (`cost.STEP_OVERHEAD_S`: the data hand-off, the gradient-norm all-reduce, the optimizer's
launches, the logging), which torchtitan runs once a step (the k groups fetched in one loop, one
clip_grad_norm_ and one optimizer step above), not once a schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.job_memo import JobMemo
from planner.model.performance import Performance, StepBreakdown
from planner.model.stage_time import LAYER_TIMES
from planner.model.torch_schedules import schedule_microbatches

ONCE = frozenset({"optimizer", "other"})
"""The StepBreakdown fields a step of k schedules pays once (module docstring); every other field
k times."""

_SUB: JobMemo[str, Job] = JobMemo(64)
"""`sub_job` per job: one object per job, so the memos keyed by the job (`JobMemo`: layer and
layout times, activations) keep hitting across the search's estimates (which visit a job per
`[torchtitan]` setting it searches: room for more than the other memos' 8)."""


def steps(job: Job) -> int:
    """The pipeline schedules a step of `job` runs: `[torchtitan] gradient_accumulation_steps` (1
    for Megatron-LM, one schedule a step; the rules refuse k > 1 without pipelining)."""
    return job.titan.gradient_accumulation_steps if job.framework == "torchtitan" else 1


def schedules_text(job: Job, layout: Layout) -> str:
    """How explain and the timeline say the step's schedules: "" for one, else "k pipeline
    schedules of m/k micro-batches a step"."""
    k = steps(job)
    if k == 1 or layout.pp == 1:
        return ""
    return f"{k} pipeline schedules of {schedule_microbatches(job, layout)} micro-batches a step"


def sub_job(job: Job) -> Job:
    """The job one of its k pipeline schedules is: global_batch_size / k and k = 1; `job` itself
    at k = 1. Remembered per job (`_SUB`), sharing its layer times (`stage_time.LAYER_TIMES`: a
    layer's time reads the micro-batch, never the global batch)."""
    k = steps(job)
    if k == 1:
        return job
    memo = _SUB.of(job)
    sub = memo.get("sub")
    if sub is None:
        titan = job.titan.model_copy(update={"gradient_accumulation_steps": 1})
        gbs = job.global_batch_size // k
        sub = memo["sub"] = replace(job, global_batch_size=gbs, torchtitan=titan)
        LAYER_TIMES.share(sub, job)
    return sub


def accumulate(
    job: Job, layout: Layout, estimate: Callable[[Job, Layout], Performance]
) -> Performance:
    """`cost.estimate` of a step of k pipeline schedules: `estimate` (cost's) of the sub-job, its
    StepBreakdown's fields x k but `ONCE`'s; the throughput, FLOPs, TFLOP/s and MFU of the whole
    step. Per stage the micro-batch's forward and backward (`stages`), the send delay
    (`p2p_hop`) and what the step adds after its last pipeline (`tails`: the last schedule's DP
    sync and the optimizer) are one schedule's; the FP8 weight casts and flush outside the stage
    times (`unscheduled_s`) come k times, as the compute they are part of."""
    k = steps(job)
    one = estimate(sub_job(job), layout)
    b = one.breakdown
    scaled = {
        f.name: getattr(b, f.name) * (1 if f.name in ONCE else k) for f in fields(StepBreakdown)
    }
    breakdown = StepBreakdown(**scaled)
    step = breakdown.step_time
    model = one.model_flops_per_step * k
    n_gpus = layout.num_gpus
    return replace(
        one,
        breakdown=breakdown,
        step_time_s=step,
        tokens_per_s_per_gpu=job.tokens_per_step / (step * n_gpus),
        model_flops_per_step=model,
        hardware_flops_per_step=one.hardware_flops_per_step * k,
        model_tflops_per_gpu=model / (step * n_gpus) / 1e12,
        mfu=one.mfu * k * one.step_time_s / step,
        unscheduled_s=one.unscheduled_s * k,
    )
