"""The pipeline changes of `planner check`'s advice (`planner.search.advice`): each other vpp, and
pp k times deeper or shallower with dp k times smaller or larger (the GPU count stays), each on
the split the plan gives, carried to the new shape as a plan file so edited would read it
(`planner.inputs.plan_layout.layout_from_section`):
- torchtitan's own split (the plan gives none): torchtitan's split at the new stage count
  (it splits so at any pp and vpp);
- Megatron's even split, with the embedding and the loss counted as layers where the plan's
  account_for_* flags say: the flags name no stage, so they carry to any pp (the rules judge
  whether the layers then divide);
- a layout string (`Layout.pipeline_layout`, pp x vpp virtual stages): a pp whose rank count
  divides its stages, vpp re-derived as stages / pp (Megatron derives it so); no other vpp
  splits it;
- per-rank layer counts (`pipeline_layers`, pp entries): no other pp.
At pp 1 there is no pipeline: vpp 1, no split."""

from __future__ import annotations

from collections.abc import Iterator

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.plan_layout import torchtitan_stages
from planner.inputs.torchtitan_pipeline import v_stages


def _titan_split(job: Job, lay: Layout) -> bool:
    """Whether the layout runs torchtitan's own pipeline split (the plan gave none)."""
    stages = torchtitan_stages(job.arch.num_layers, lay.pp * lay.vpp)
    return job.framework == "torchtitan" and lay.pp > 1 and lay.pipeline_layout == stages


def _own_split(job: Job, lay: Layout) -> bool:
    """Whether the layout is split as torchtitan splits it at any shape: its own split, or no
    pipeline and no split given."""
    return job.framework == "torchtitan" and (
        _titan_split(job, lay) or (lay.pp == 1 and lay.even_split)
    )


def other_vpps(job: Job, lay: Layout) -> Iterator[tuple[int, Layout]]:
    """(vpp, layout) of each other vpp, the nearest first down then up (fewer chunks hold fewer
    micro-batches in flight, more hold smaller ones), up to a layer a chunk; none without a
    pipeline or on a layout string (it names each virtual stage)."""
    own = _titan_split(job, lay)
    if lay.pp == 1 or (lay.pipeline_layout is not None and not own):
        return
    most = max(lay.stage_layers(job.arch.num_layers))  # a chunk holds a layer at least
    for vpp in [*range(lay.vpp - 1, 0, -1), *range(lay.vpp + 1, most + 1)]:
        other = _at_vpp(job, lay, vpp)
        if own:  # torchtitan's own split over the new stages
            stages = torchtitan_stages(job.arch.num_layers, lay.pp * vpp)
            other = other.with_(pipeline_layout=stages)
        yield vpp, other


def reshaped(job: Job, lay: Layout, pp: int) -> Layout | None:
    """The layout at `pp` pipeline ranks, dp by the inverse factor, its split carried (the
    module docstring); None where the split does not carry."""
    new = lay.with_(pp=pp, dp=lay.dp * lay.pp // pp)
    if lay.pipeline_layers is not None:
        return None
    if lay.pipeline_layout is not None and not _own_split(job, lay):  # a layout string
        stages = len(lay.pipeline_layout)
        return None if stages % pp else _at_vpp(job, new, stages // pp)
    if pp == 1:  # no pipeline: no split
        return _at_vpp(job, new.with_(pipeline_layout=None), 1)
    if _own_split(job, lay):
        return new.with_(pipeline_layout=torchtitan_stages(job.arch.num_layers, pp * lay.vpp))
    return new


def _at_vpp(job: Job, lay: Layout, vpp: int) -> Layout:
    """The layout at `vpp` stages a rank, placed as the job's schedule places them there."""
    return lay.with_(vpp=vpp, v_stages=v_stages(job, vpp))


def other_pps(job: Job, lay: Layout) -> Iterator[tuple[int, Layout | None]]:
    """(pp, layout) of pp times each factor of dp (dp divided by it), then pp divided by each
    of its factors (dp times it): the GPU count stays."""
    for k in _factors(lay.dp):
        yield lay.pp * k, reshaped(job, lay, lay.pp * k)
    for k in _factors(lay.pp):
        yield lay.pp // k, reshaped(job, lay, lay.pp // k)


def _factors(n: int) -> list[int]:
    """The divisors of n above 1, ascending."""
    return [k for k in range(2, n + 1) if n % k == 0]
