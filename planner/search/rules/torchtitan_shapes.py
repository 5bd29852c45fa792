"""What torchtitan's pipeline schedules and attention sharding take: rules on a plan with
`[training] framework = "torchtitan"` (`planner.search.rules.torchtitan` lists them with the
others).

Sources: pytorch/torchtitan e347b1e5 distributed/pipeline_parallel.py (single-stage schedules
take one stage per rank, multi-stage ones at least two, V schedules two placed in a V: the
layout's placement, `placement`), torch's schedules for the micro-batches
(`planner.model.torch_schedules`), and b5bcd76c models/common/decoder.py (tp must divide the
attention heads and the KV heads: "tensor_parallel_degree (..) must divide n_kv_heads"; at
e347b1e5 a tp that does not divide them splits the K and V projections into parts of heads,
which the attention's view into whole heads then refuses).
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.plan_layout import too_many_stages, torchtitan_stages
from planner.inputs.torchtitan import SINGLE_STAGE, V_SHAPED
from planner.inputs.torchtitan_pipeline import v_stages
from planner.model import torch_schedules
from planner.model.schedule import schedule_name
from planner.search.rules.base import Violation


def stages_wanted(name: str, vpp: int) -> str | None:
    """What torchtitan's schedule `name` takes where vpp stages per rank are not it (1F1B / GPipe
    one, ZBVZeroBubble and DualPipeV two, the other looped schedules two or more); None where
    they are (the search offers only those: `space.options`)."""
    if name in SINGLE_STAGE and vpp != 1:
        return "one stage per rank; Interleaved1F1B, LoopedBFS or InterleavedZeroBubble take more"
    if name in V_SHAPED and vpp != 2:
        return "exactly two stages per rank"
    if name not in SINGLE_STAGE and vpp < 2:
        return "at least two stages per rank; 1F1B or GPipe take one"
    return None


SPLIT_BACKWARD = ("InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")
"""torch's schedules that split each backward into its input and weight gradients, which no
compiled stage runs: each calls `_check_torch_compile_compatibility` ("we dont support
input/weight backward split with torch.compile", pytorch/pytorch torch/distributed/pipelining/
schedules.py), and torchtitan b5bcd76c says so of its per-block compile
(experiments/graph_trainer/tests/test_numerics.py:355-357: "torch.compile is incompatible with
those eager PP schedules")."""


def schedule(job: Job, lay: Layout) -> Violation | None:
    """The schedule takes the plan's stages per rank: 1F1B / GPipe one, ZBVZeroBubble and
    DualPipeV two, the other looped schedules two or more; and the split-backward schedules run
    uncompiled (`SPLIT_BACKWARD`)."""
    if job.framework != "torchtitan":
        return None
    name = job.titan.schedule(lay.vpp)
    if lay.pp == 1:
        return _accumulation(job, lay)
    if job.titan.compile and name in SPLIT_BACKWARD:
        return Violation(
            "tt_schedule",
            "torchtitan.compile",
            f"true with pipeline_parallel_schedule {name!r}: torch's split-backward schedules "
            'run no compiled stage (torchtitan: "torch.compile is incompatible with those eager '
            'PP schedules"); set compile = false or another schedule',
        )
    want = stages_wanted(name, lay.vpp)
    if want is None:
        return _microbatches(job, lay, name)
    return Violation(
        "tt_schedule",
        "parallel.vpp",
        f"vpp {lay.vpp}: torchtitan's pipeline_parallel_schedule {name!r} takes {want}",
    )


def placement(job: Job, lay: Layout) -> Violation | None:
    """The layout places its stages as the schedule does (`Layout.v_stages`): in a V under
    torchtitan's ZBVZeroBubble and DualPipeV (e347b1e5 distributed/pipeline_parallel.py:447-469,
    b5bcd76c :551-567: stages r and 2 pp - 1 - r on rank r, the output layer and loss on rank 0
    beside the embedding), stage k on rank k % pp under every other (Megatron-LM's and
    torchtitan's looped schedules). Plans and the search build layouts so
    (`torchtitan_pipeline.v_stages`); a layout that says otherwise would be judged on the wrong
    ranks' layers and roles."""
    want = v_stages(job, lay.vpp)
    if lay.pp == 1 or lay.v_stages == want:
        return None
    name = schedule_name(job, lay)
    runs = "stages r and 2 x pp - 1 - r on rank r" if want else "stage k on rank k mod pp"
    return Violation(
        "tt_placement",
        "torchtitan.pipeline_schedule" if job.framework == "torchtitan" else "training.framework",
        f"the layout places its stages {'in a V' if lay.v_stages else 'looped'}, but "
        f"{name!r} runs {runs}",
    )


def stage_count(job: Job, lay: Layout) -> Violation | None:
    """torchtitan's own split (the plan gives no layout string) over at most the model's layers
    and its embedding and loss: torchtitan raises above them, as the plan file's reading refuses
    them (`plan_layout.too_many_stages`, one check for both); the split such a layout carries
    (`plan_layout.torchtitan_stages`) would hold empty stages."""
    if job.framework != "torchtitan" or lay.pp == 1:
        return None
    layers = job.arch.num_layers
    own = torchtitan_stages(layers, lay.pp * lay.vpp, job.arch.mtp_num_layers)
    why = too_many_stages(layers, lay.pp, lay.vpp)
    if why is None or lay.pipeline_layout not in (None, own):
        return None
    field, value = ("vpp", lay.vpp) if lay.vpp > 1 else ("pp", lay.pp)
    return Violation("tt_stages", f"parallel.{field}", f"{value}: {why}")


def _accumulation(job: Job, lay: Layout) -> Violation | None:
    """`[torchtitan] gradient_accumulation_steps` k: k > 1 needs pipelining (without it planner's
    micro-batches are torchtitan's accumulation steps already, e347b1e5 train.py:561, the non-PP
    forward_backward_step), and k divides the step's micro-batches, global_batch_size / (dp x
    micro_batch_size): each of the k schedules runs as many (`planner.model.titan_accumulation`)."""
    k = job.titan.gradient_accumulation_steps
    if k == 1:
        return None
    field = "torchtitan.gradient_accumulation_steps"
    if lay.pp == 1:
        return Violation(
            "tt_accumulation",
            field,
            f"{k}: pipeline schedules a step need pipeline_parallel_degree > 1; without "
            "pipelining the micro-batches, global_batch_size / (dp x micro_batch_size), are "
            "torchtitan's accumulation steps already: set it to 1",
        )
    m = lay.num_microbatches(job.global_batch_size) if lay.dp * lay.micro_batch_size else 0
    if m % k == 0 and m:
        return None
    return Violation(
        "tt_accumulation",
        field,
        f"{k} does not divide the step's micro-batches, global_batch_size / (dp x "
        f"micro_batch_size) = {job.global_batch_size} / ({lay.dp} x {lay.micro_batch_size}) = "
        f"{m}: each of the {k} pipeline schedules runs local_batch_size / "
        "pipeline_parallel_microbatch_size of them",
    )


def _microbatches(job: Job, lay: Layout, name: str) -> Violation | None:
    """torch's micro-batch conditions for the schedule (`torch_schedules.refusal`), on one
    schedule's micro-batches (as `torch_schedules.schedule_microbatches` counts them: of k a step
    with `[torchtitan] gradient_accumulation_steps`, which must divide them first)."""
    if not lay.dp * lay.micro_batch_size:
        return None
    if (wrong := _accumulation(job, lay)) is not None:
        return wrong
    k = job.titan.gradient_accumulation_steps  # it divides them (`_accumulation`)
    m = lay.num_microbatches(job.global_batch_size) // k  # one schedule's
    why = torch_schedules.refusal(name, lay.pp, m)
    if why is None:
        return None
    each, by = ("", "") if k == 1 else (f" / torchtitan.gradient_accumulation_steps {k}", f" / {k}")
    return Violation(
        "tt_microbatches",
        "training.global_batch_size",
        f"torchtitan's pipeline_parallel_schedule {name!r} at pipeline_parallel_degree {lay.pp} "
        f"needs {why}; the micro-batches of a schedule are global_batch_size / (dp x "
        f"micro_batch_size){each} = {job.global_batch_size} / ({lay.dp} x "
        f"{lay.micro_batch_size}){by} = {m}",
    )


def heads(job: Job, lay: Layout) -> Violation | None:
    """tp divides the attention heads and the KV heads (module docstring): torchtitan shards
    whole heads and never replicates KV heads, where Megatron-LM does for a tp above them."""
    if job.framework != "torchtitan" or lay.tp == 1:
        return None
    arch = job.arch
    kv = arch.num_attention_heads if arch.multi_latent_attention else arch.query_groups
    for what, n in (("n_heads", arch.num_attention_heads), ("n_kv_heads", kv)):
        if n % lay.tp:
            return Violation(
                "tt_heads",
                "parallel.tp",
                f"tensor_parallel_degree ({lay.tp}) must divide {what} ({n}): torchtitan "
                "shards whole heads and does not replicate KV heads",
            )
    return None
