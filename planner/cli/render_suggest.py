"""Human output of `planner suggest`: the ranked table, the layouts folded into its rows (same step
time, cp traded for micro-batch size), why the first beats the second, what the search considered
and rejected, and, when nothing fits, why and what would."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planner.cli import explain_notes, switch_notes
from planner.cli.render import capacity_text
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.units import GIB
from planner.model import titan_accumulation
from planner.model.known_gaps import optimistic
from planner.model.performance import BOTTLENECK_MIN_SHARE, COMPUTE_BOUND, COST_NAMES, StepBreakdown
from planner.search.pool_plan import PoolPlan
from planner.search.rules import bf16_values
from planner.search.splits import FREE_FORM_VPP
from planner.search.suggest import Infeasible
from planner.search.titan_variants import variant_text, variants
from planner.search.top_k import Candidate, SearchResult
from planner.search.twins import Row

_PARTS = {"compute": "compute"} | {k: v for k, v in COST_NAMES.items() if k != "other"}
"""Step-time components compared when explaining why #1 beats #2."""


def _microbatches(job: Job, lay: Layout) -> str:
    """The step's micro-batches, as "k x n" where torchtitan runs them in k pipeline schedules
    of n (`model.titan_accumulation`)."""
    k = titan_accumulation.steps(job) if lay.pp > 1 else 1
    m = lay.num_microbatches(job.global_batch_size)
    return f"{k}x{m // k}" if k > 1 else str(m)


def _split(c: Candidate, num_layers: int) -> str:
    """The decoder layers of the first / a middle / the last rank, or "even"."""
    if c.layout.even_split:
        return "even"
    pl = c.layout.stage_layers(num_layers)
    return f"{pl[0]}/{pl[1] if len(pl) > 2 else ''}.../{pl[-1]}" if len(pl) > 2 else f"{pl}"


def candidates_table(job: Job, cands: list[Candidate], objective: str) -> Table:
    cap = capacity_text(cands[0].memory) if cands else "?"
    noun = "layout" if len(cands) == 1 else "layouts"
    t = Table(title=f"Top {len(cands)} {noun} by {objective}, memory capacity {cap}")
    cols = ["#", "tp", "pp", "dp", "cp", "ep", "vpp", "mbs", "m", "split", "zero", "recompute"]
    own = _own_peak(job, cands)
    cols += ["peak GiB", "step s", "tok/s/GPU", "MFU bf16pk"]
    cols += [f"MFU {own}pk"] if own else []
    cols += ["top cost"]
    titan = job.framework == "torchtitan" and not job.pools
    if titan:
        cols.insert(cols.index("recompute") + 1, "torchtitan")
    for col in cols:
        left = col in ("split", "recompute", "torchtitan", "top cost")
        t.add_column(col, justify="left" if left else "right")
    for i, c in enumerate(cands, 1):
        lay, p = c.layout, c.performance
        t.add_row(
            str(i),
            str(lay.tp),
            str(lay.pp),
            str(lay.dp),
            _cp(lay),
            _ep(lay),
            _vpp(lay),
            str(lay.micro_batch_size),
            _microbatches(job, lay),
            _split(c, job.arch.num_layers),
            str(lay.zero_stage),
            _savers(lay, job),
            *([variant_text(job, c) or "as job"] if titan else []),
            f"{c.memory.peak / GIB:.1f}",
            f"{p.step_time_s:.3f}" + ("+" if optimistic(job, lay) else ""),
            f"{p.tokens_per_s_per_gpu:,.0f}",
            f"{p.mfu_bf16_peak:.1%}",
            *([f"{p.mfu:.1%}"] if own else []),
            p.bottleneck(switch_notes.host_seconds(job, lay)),
        )
    t.caption = (
        "m = micro-batches per step (k x n: k pipeline schedules of n each); split = layers on "
        "first/middle/last pipeline rank; "
        f"{_mfu_caption(own)}; "
        f"top cost = largest cost besides compute if >= {BOTTLENECK_MIN_SHARE:.0%} of the step, "
        f"else {COMPUTE_BOUND}"
    )
    if titan:
        t.caption += (
            "; torchtitan = the [torchtitan] settings searched beside the layout where they "
            "differ from the job's (reshard = reshard_after_forward, hsdp = dp_replicate, "
            "every N = selective_layer_every: every N-th layer recomputed whole, full(block k) "
            "= k layers of each chunk)"
        )
    if any(c.layout.cp_exchange for c in cands):
        t.caption += "; cp a2a / all_gather = the context-parallel exchange (--cp-comm-type)"
    if any(_group(c.layout) for c in cands):
        t.caption += (
            "; vpp v gN = interleaved in groups of N micro-batches a virtual stage "
            "(--microbatch-group-size-per-virtual-pipeline-stage; else pp)"
        )
    if any(c.layout.ep_comm_overlap for c in cands):
        t.caption += "; ov = EP all-to-all overlapped (--overlap-moe-expert-parallel-comm)"
    if any(optimistic(job, c.layout) for c in cands):
        t.caption += (
            "; step s + = a regime where measured runs took longer than predicted "
            "(planner/model/known_gaps.py; explain says which): read it as a lower bound"
        )
    return t


def _own_peak(job: Job, cands: list[Candidate]) -> str | None:
    """The peak the table's second MFU column is against, as its label names it ("fp8", "fp4";
    for fp32 "tf32", the TF32 tensor-core peak its GEMMs run at, or "fp32" on GPUs without TF32
    tensor cores: `Performance.peak_name`, what explain's "of the TF32 peak" says); None where
    `Performance.mfu_text` gives no second figure (bf16, and fp16, whose peak is bf16's)."""
    if job.precision in ("bf16", "fp16"):
        return None
    name = cands[0].performance.peak_name if cands else ""
    return (name or job.precision).lower().replace(" ", "")


def _mfu_caption(own: str | None) -> str:
    """What the MFU columns are against: the bf16 dense peak, and the job's own (`_own_peak`)."""
    text = "MFU bf16pk = model FLOPs against the GPU's dense bf16 peak"
    if own is None:
        return text
    names = {"tf32": "TF32 (fp32 training's GEMMs)", "fp32": "FP32 (no TF32 tensor cores)"}
    return f"{text}, MFU {own}pk against its dense {names.get(own, own.upper())} peak"


def _cp(lay: Layout) -> str:
    """CP with an exchange other than Megatron's default p2p ring."""
    return f"{lay.cp} {lay.cp_exchange}" if lay.cp_exchange else str(lay.cp)


def _group(lay: Layout) -> int | None:
    """The micro-batch group the layout sets for its interleaved schedule (None: Megatron's pp,
    or not interleaved, where nothing reads it)."""
    return lay.microbatch_group_size_per_vp_stage if lay.vpp > 1 else None


def _vpp(lay: Layout) -> str:
    """VPP with the micro-batch group where the layout sets one (`space.group_of`): two rows of
    one vpp run different schedules where their groups differ."""
    g = _group(lay)
    return f"{lay.vpp} g{g}" if g is not None else str(lay.vpp)


def _ep(lay: Layout) -> str:
    """EP with its overlap and a dispatcher other than Megatron's default all-to-all."""
    text = f"{lay.ep} ov" if lay.ep_comm_overlap else str(lay.ep)
    if lay.ep > 1 and lay.moe_token_dispatcher_type != "alltoall":
        flex = lay.moe_token_dispatcher_type == "flex"
        text += f" {lay.moe_flex_dispatcher_backend if flex else 'allgather'}"
    return text


def _savers(lay: Layout, job: Job) -> str:
    """The memory savers: recompute (with modules or method), CPU offloading (layers, or
    fine-grained: modules), and Megatron's TP overlap left off (its userbuffers freed) where
    sequence parallelism would allow it (torchtitan has no userbuffers to free; fp16 and fp32
    activations never run it, `rules.precision.tp_overlap_bf16`, so its absence there is no
    choice)."""
    text = lay.recompute_text()
    if lay.cpu_offloading_num_layers:
        text += f" + offload {lay.cpu_offloading_num_layers}"
    if lay.offload_modules:
        text += f" + offload({','.join(lay.offload_modules)})"
    megatron = job.framework == "megatron" and bf16_values(job)
    if lay.sequence_parallel and not lay.tp_comm_overlap and megatron:
        text += " + no tp overlap"
    return text


def why_first(a: Candidate, b: Candidate) -> str:
    """One line: the step-time components where #1 gains most over #2."""
    da: StepBreakdown = a.performance.breakdown
    db: StepBreakdown = b.performance.breakdown
    gains = {name: getattr(db, f) - getattr(da, f) for f, name in _PARTS.items()}
    best = max(gains, key=lambda k: gains[k])
    worst = min(gains, key=lambda k: gains[k])
    gap = b.performance.step_time_s - a.performance.step_time_s
    if gap <= 0:
        return "#1 and #2 predict the same step time; #1 is listed first as the simpler layout"
    line = (
        f"#1 beats #2 by {gap * 1e3:,.0f} ms per step, mostly on {best} "
        f"({gains[best] * 1e3:,.0f} ms less)"
    )
    if gains[worst] < 0:
        line += f", though it spends {-gains[worst] * 1e3:,.0f} ms more on {worst}"
    return line


def twin_lines(rows: list[Row[Candidate]]) -> list[str]:
    """'#1 also: cp 2 x mbs 4 (dp 2, peak 70.7 GiB), ...' for each row with twins folded into it,
    under a line saying what they are."""
    return folded_lines([r.equivalents for r in rows])


def folded_lines(groups: Sequence[Sequence[Candidate | PoolPlan]]) -> list[str]:
    """`twin_lines` of each row's folded twins (a pooled search's too, `PoolSearch.twins`)."""
    lines = [
        f"  #{i} also: "
        + ", ".join(
            f"cp {t.layout.cp} x mbs {t.layout.micro_batch_size} (dp {t.layout.dp}, "
            f"peak {t.memory.peak / GIB:.1f} GiB)"
            for t in twins
        )
        for i, twins in enumerate(groups, 1)
        if twins
    ]
    if not lines:
        return []
    head = (
        "Same step time, folded into the row: cp traded for micro-batch size "
        "(dp x cp, mbs / cp and all else unchanged):"
    )
    return [head, *lines]


def print_result(
    console: Console,
    job: Job,
    res: SearchResult,
    objective: str,
    rows: list[Row[Candidate]] | None = None,
) -> None:
    console.print(candidates_table(job, res.candidates, objective))
    for line in twin_lines(rows or []):
        console.print(line, highlight=False)
    if len(res.candidates) > 1:
        console.print(why_first(res.candidates[0], res.candidates[1]))
    if res.candidates and not job.pools:
        top = res.candidates[0]
        # weighed at the headroom the search ranked with (the candidate's memory report's)
        headroom = top.memory.headroom_pct
        for lead, note in explain_notes.first_pick_notes(
            job, top.layout, top.performance, headroom
        ):
            console.print(f"{lead} {note}", highlight=False)
    console.print(summary(res))
    if job.framework == "torchtitan" and not job.pools:
        chunks = job.titan.loss_chunks
        every = "" if chunks > 1 else ", each also with full recompute of every N-th layer"
        loss = (
            f"the loss in {chunks} chunks (today's torchtitan: --target torchtitan-module)"
            if chunks > 1
            else "the loss on the whole logits (MTPLoss: today's torchtitan runs MTP so)"
            if job.titan.num_mtp_layers
            else "the loss on the whole logits (torchtitan e347b1e5's TOML; today's torchtitan "
            "runs it in chunks: set [torchtitan] loss_chunks = 8 in the job to plan for it)"
        )
        console.print(
            f"torchtitan: {len(variants(job))} settings searched (reshard_after_forward x "
            'dp_replicate; under pipelining only reshard_after_forward "default": torch '
            f"pipelining keeps the stage's parameters gathered whatever it says){every}; the "
            f"counts above are summed over them. Planned with {loss}.",
            highlight=False,
        )


def summary(res: SearchResult) -> str:
    rej = ", ".join(f"{k}: {v}" for k, v in res.rejected.most_common())
    return (
        f"{res.space_size:,} layouts in {res.structures} parallel structures; "
        f"{res.expanded} structures expanded, {res.scored:,} layouts scored exactly "
        f"(certified exact top K; free-form pipeline splits to vpp {FREE_FORM_VPP} unless --vpp "
        f"bounds it) in {res.seconds:.2f} s. Rejected: {rej or 'none'}."
    )


def print_infeasible(console: Console, why: Infeasible, res: SearchResult) -> None:
    console.print(f"[red]nothing fits[/]: {escape(why.binding)}", markup=True)
    if why.changes:
        console.print("Smallest changes that would make something fit:")
        for c in why.changes:
            console.print(f"  {c}")
    console.print(summary(res))
