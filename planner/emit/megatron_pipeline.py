"""Megatron-LM's flags for a plan's pipeline split (`pipeline_args`, for `planner.emit.megatron`):
the plan's own layout string, the account-for flags of an even split, the simplest flags that
give the split (none, layers per virtual stage, --decoder-first/last-pipeline-num-layers with
--num-virtual-stages-per-pipeline-rank, the only VPP flag they combine with), else
--pipeline-model-parallel-layout ("E" embedding, "t" decoder layer, "m" MTP, "L" loss, "|"
between stages; stage k on rank k % pp, chunk k // pp). Flag names: Megatron-LM d98e8a64."""

from __future__ import annotations

from planner.emit.megatron_model import Arg
from planner.inputs import pipeline_layout
from planner.inputs.arch import ModelArch
from planner.inputs.layout import Layout


def _first_last(layers: tuple[int, ...], vpp: int) -> list[Arg] | None:
    """--decoder-first/last-pipeline-num-layers when only the end ranks differ (middle ranks
    equal; every count a multiple of vpp, as TransformerConfig checks); None otherwise."""
    if len(layers) == 2:  # one flag: the other rank is the lone "middle" rank
        ends, middle = {"first": layers[0]}, [layers[1]]
    else:
        middle = list(layers[1:-1])
        if len(set(middle)) != 1:
            return None
        ends = {k: n for k, n in (("first", layers[0]), ("last", layers[-1])) if n != middle[0]}
    if any(n % vpp for n in [*ends.values(), middle[0]]):
        return None
    args: list[Arg] = [(f"--decoder-{k}-pipeline-num-layers", str(n)) for k, n in ends.items()]
    if vpp > 1:
        args.append(("--num-virtual-stages-per-pipeline-rank", str(vpp)))
    return args


def pipeline_args(arch: ModelArch, lay: Layout) -> list[Arg]:
    """How the decoder layers are split over pipeline ranks and virtual stages: the plan's own
    layout string, or the account-for flags of an even split, or the simplest flags that give
    the split (none, layers per virtual stage, first/last counts), else the layout string of
    `Layout.stages`."""
    if lay.pp == 1 or arch.is_hybrid:  # a hybrid stack's split is in its pattern's '|'
        return []
    if lay.pipeline_layout is not None:
        return [("--pipeline-model-parallel-layout", pipeline_layout.compact(lay.pipeline_layout))]
    accounted: list[Arg] = [
        (f"--account-for-{part}-in-pipeline-split",)
        for part, on in (
            ("embedding", lay.account_for_embedding_in_pipeline_split),
            ("loss", lay.account_for_loss_in_pipeline_split),
        )
        if on
    ]
    if accounted:
        vpp: list[Arg] = (
            [("--num-virtual-stages-per-pipeline-rank", str(lay.vpp))] if lay.vpp > 1 else []
        )
        return accounted + vpp
    layers = lay.stage_layers(arch.num_layers)
    even = len(set(layers)) == 1
    if even and layers[0] % lay.vpp == 0:
        if lay.vpp == 1:
            return []
        return [("--num-layers-per-virtual-pipeline-stage", str(layers[0] // lay.vpp))]
    first_last = None if even else _first_last(layers, lay.vpp)
    if first_last is not None:
        return first_last
    stages = lay.stages(arch.num_layers, arch.mtp_num_layers)
    return [("--pipeline-model-parallel-layout", pipeline_layout.compact(stages))]
