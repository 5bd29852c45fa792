"""Where the model is known to be optimistic: layouts of a regime in which measured steps run well
behind its estimate and no term of the model accounts for the gap. Two regimes: one micro-batch
per step with model-parallel collectives and little work per GPU (`in_one_micro_batch_regime`),
and a Megatron MoE whose attention is tensor-parallel over experts that are not
(`in_folded_moe_regime`); a layout may be in both. Besides them, a torchtitan plan whose
attention is FlexAttention (`in_flex_attention`), timed at faster kernels' rates, no gap
measured. explain and suggest say so (`planner.cli.explain_notes`, the JSON's
`performance.optimistic`: `optimistic`); benchmarks/fidelity.py reports the measured runs in and
out of them.
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import titan_attention

ONE_MICRO_BATCH_GAP = 0.24
"""How much longer than predicted the measured steps of one-micro-batch runs with tensor or expert
parallelism and little work per GPU are: the median over the 11 MLPerf Training runs of that
kind in benchmarks/data/mlperf/runs.yaml (Llama 3.1 8B and gpt-oss-20b on H100, GB200, GB300 and
B300, tp 2-4 or ep 4-8, 512 to 4,096 tokens per GPU per micro-batch). Since the floor of small
kernels is modelled (`layer_time.KERNEL_MIN_S`, a third of these steps) NVIDIA's GB200 / GB300 8B
runs and the gpt-oss run on 64 B300 are within 5% (they were +27% to +63%), the gpt-oss run on
512 GB300 +15%; what stays is Cisco's three H100 runs at tp 2 (+28% to +45%) and the gpt-oss
runs on 72 GB300 at cp 2 ep 4 (+25% to +26%; +21% to +22% before the learned-routing load
depended on the experts per rank, `routing_load.learned_routing_load`: 1.10 at ep 4 of 8 experts
each, 1.2 before). The one-micro-batch runs with more work per GPU (Cisco's B300 8B at tp 2 with
8,192 tokens; Dell's GB300 gpt-oss at ep 2 with 24,576) and the 52 with tp 1 and ep 1 (median
0%) are not in it. No term of the model accounts for what stays (the data-parallel sync then
overlaps the whole step, and every tensor- and expert-parallel collective runs under it);
tests/bench/test_known_gaps.py recomputes the median from the rows."""

ONE_MICRO_BATCH_TOKENS = 4096
"""The most tokens per GPU per micro-batch (micro-batch x sequence / (tp x cp)) at which
`in_one_micro_batch_regime` holds: the largest of the runs that showed the gap."""


def in_one_micro_batch_regime(job: Job, layout: Layout) -> bool:
    """One micro-batch per step, tp > 1 or ep > 1, at most ONE_MICRO_BATCH_TOKENS tokens per GPU
    per micro-batch: the regime ONE_MICRO_BATCH_GAP measures (explain's
    `planner.cli.explain_notes.one_micro_batch_text` and the JSON's `performance.optimistic`)."""
    if layout.num_microbatches(job.global_batch_size) != 1:
        return False
    if layout.tp <= 1 and layout.ep <= 1:
        return False
    tokens = layout.micro_batch_size * job.seq_length / (layout.tp * layout.cp)
    return tokens <= ONE_MICRO_BATCH_TOKENS


FOLDED_MOE_GAP = 0.18
"""How much longer than predicted the measured steps of Megatron MoE runs with tensor-parallel
attention over experts that are not (tp > 1, expert tp 1, ep > 1: Megatron's MoE parallel folding)
are: the median over the 12 such runs in the repository (benchmarks/data/mlperf/runs.yaml and
Megatron-LM's release runs, benchmarks/functional_steps.py `load_release_steps`): MLPerf DeepSeek-V3
on 256-8,192 GB200 at tp 2 ep 32, growing with the GPU count, gpt-oss-20b at tp 2 on 64 and 128 H100
and 512 GB300 (also in the one-micro-batch regime), Megatron-LM's DeepSeek-V3 proxy release runs at
tp 2 on H100 and GB200, and its Mixtral 8x7B release run at tp 2 ep 8 (the one below): -6% to +65%
(2026-12-05, since NCCL's rings and all-reduces run at nccl-tests' measured share of NVLink by group
size, `nccl_shares.NCCL_NVLINK_SHARE`: it slows the tp 2 collectives: 0.22 before; 0.25 before the
attention kernels were cuDNN's measured ones, `planner.model.attention`). The 25 MoE runs outside
the regime (tp 1, or the experts split as the attention is) are within a median +5%; before the
shares (2026-12-04) the 52 dense MLPerf runs at tp > 1 were within +4% and Megatron-LM's functional
tests (tiny models) showed +6% in the regime (13 runs, the A100 ones -5% to -1%) against +2% outside
it. The runs in it are all fine-grained (32-256 experts, top-4 / top-8) but the Mixtral one, and all
at tp 2. Fine-grained experts alone do not show it: at tp 1 Megatron-LM's isolated MoE layer on 8
H100 (benchmarks/moe_layer.py: the DeepSeek-like proxy, top-8 of 32 experts, 4 a rank) is within -7%
to +7% and the MLPerf DeepSeek-V3 runs on GB300 (tp 1, ep 32) -2% to -12%. Whether it is the folding
or tp 2 itself the data cannot separate, and no term of the model accounts for it (the TP
collectives, the dispatch of each TP rank's sequence shard and the smaller per-expert GEMMs are each
modelled). tests/bench/test_known_gaps.py recomputes the median from the rows."""


def in_folded_moe_regime(job: Job, layout: Layout) -> bool:
    """A Megatron MoE layout whose attention is tensor-parallel (tp > 1) over expert-parallel
    experts that are not (expert tp 1, ep > 1): the regime FOLDED_MOE_GAP measures."""
    if job.framework != "megatron" or not job.arch.is_moe:
        return False
    return layout.tp > 1 and layout.expert_tp == 1 and layout.ep > 1


def in_flex_attention(job: Job, layout: Layout) -> bool:
    """A torchtitan plan whose attention is FlexAttention's Triton kernel
    (`planner.model.titan_attention.backend`), timed at cuDNN's fused rates for want of a
    published forward and backward rate of it: optimistic by an amount no run measures."""
    return titan_attention.backend(job, layout) == "flex"


def optimistic(job: Job, layout: Layout) -> bool:
    """Whether the layout is in a regime where measured steps ran well behind the model (either
    of the two), or whose attention kernel is timed faster than it runs (`in_flex_attention`):
    the JSON's `performance.optimistic`."""
    return (
        in_one_micro_batch_regime(job, layout)
        or in_folded_moe_regime(job, layout)
        or in_flex_attention(job, layout)
    )
