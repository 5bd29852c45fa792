"""The decoder layers an FP8 or NVFP4 job keeps in bf16 (Megatron --first-last-layers-bf16 with
--num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16: `Job.bf16_layers_at_start`,
`Job.bf16_layers_at_end`).

Megatron-Core (d98e8a64, fp8_utils.py `get_fp8_context`, fp4_utils.py `get_fp4_context`) runs
layer i outside the FP8 / FP4 autocast when i < start or i >= num_layers - end, and builds its
weights outside it too (`is_init`): those layers' GEMMs run at the bf16 rate with no quantisation,
their weights are bf16 parameters (never FP8 / NVFP4 ones, whatever the param gather), and their
linear layers keep 16-bit inputs. The MTP layers are not decoder layers here: they keep the
job's precision.

`planner.model.stage_time` times a rank's bf16 layers as the job's bf16 twin (`bf16_twin`) would;
`planner.model.stage_params` leaves their weights out of the quantised ones; and
`planner.model.memory` counts the activations of every rank that holds one at 16 bits (the
safe side: its quantised layers' inputs are counted at bf16 too).
"""

from __future__ import annotations

from dataclasses import replace

from planner.inputs.plan import Job
from planner.model.job_memo import JobMemo
from planner.model.schedule import Chunks

_TWINS: JobMemo[str, Job] = JobMemo()
"""`bf16_twin` per job: one object, so that the layer-time memos keyed by job identity hold."""


def bf16_ranges(job: Job, chunks: Chunks) -> Chunks:
    """The parts of `chunks` (a rank's decoder layers) that run in bf16, as ranges (none for a
    bf16 job or one without bf16 layers)."""
    start, end = job.bf16_layers_at_start, job.bf16_layers_at_end
    if not job.quantised or not (start or end):
        return ()
    tail = job.arch.num_layers - end
    out: list[range] = []
    for c in chunks:
        for lo, hi in ((c.start, min(c.stop, start)), (max(c.start, tail), c.stop)):
            if lo < hi:
                out.append(range(lo, hi))
    return tuple(out)


def bf16_twin(job: Job) -> Job:
    """The job with its linear layers in bf16: how its bf16 layers run (its GPU's bf16 peak, no
    quantisation, no FP8 issue overhead). Megatron runs them outside the FP8 / NVFP4 autocast, so
    in the parameters' dtype (`Job.params_dtype`): fp16 ones in fp16, and in an fp32 model in fp32
    (TF32 GEMMs, `planner.model.fp32`)."""
    memo = _TWINS.of(job)
    if "bf16" not in memo:
        memo["bf16"] = replace(
            job, precision=job.params_dtype, bf16_layers_at_start=0, bf16_layers_at_end=0
        )
    return memo["bf16"]
