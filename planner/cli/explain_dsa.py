"""explain's note on a DeepSeek sparse attention plan (`planner.model.dsa`): which kernels run
(and why the requested ones do not, where Megatron falls back without a word), what an attention
block keeps per token and what its indexer and attention take per micro-batch, and how the
model FLOPs count it."""

from __future__ import annotations

from planner.inputs.hybrid import ATTENTION
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import activations as act
from planner.model import attention_time, dsa, dsa_time, layer_time, stage_activations

KERNEL_NAMES = {
    "none": "the PyTorch path (dense: fp32 scores over every key, per head)",
    "tilelang": "TileLang's sparse MLA",
    "cudnn": "FlashMLA and cuDNN's sparse kernels",
}


def dsa_text(job: Job, layout: Layout) -> str | None:
    """The note, for a DSA model; None otherwise."""
    arch = job.arch
    if not arch.has_dsa:
        return None
    sh = stage_activations.shard(job, layout)
    kernels = dsa.backend(job, layout.tp)
    text = f"DeepSeek sparse attention runs {KERNEL_NAMES[kernels]}"
    why = dsa.fallback(job, layout.tp)
    if why is not None:
        text += f" (dsa_kernel_backend {job.dsa_kernel_backend} falls back: {why})"
    gpu = layer_time.gpu_of(job)
    s = job.seq_length
    i_fwd, i_bwd = dsa_time.indexer_time(job, gpu, sh.tokens, s, layout.tp)
    efficiency = layer_time.ATTENTION_EFFICIENCY
    a_fwd, a_bwd = dsa_time.attention_seconds(job, gpu, sh.tokens, s, layout.tp, efficiency)
    per_token = act.layer_bytes(arch, ATTENTION, sh) / sh.tokens
    text += (
        f": an attention block keeps {per_token / 1e3:.1f} kB a token on each GPU, its indexer "
        f"takes {(i_fwd + i_bwd) * 1e3:.1f} ms and its attention {(a_fwd + a_bwd) * 1e3:.1f} ms "
        "forward and backward per micro-batch"
    )
    dense = attention_time.core_attention(job, gpu, sh.tokens, s, layout.tp, efficiency)
    text += (
        f" (dense flash MLA's would take {(dense.fwd + dense.bwd) * 1e3:.1f} ms). The model FLOPs "
        "are Megatron's count, dense causal MLA"
    )
    if kernels == "none":
        text += (
            "; the dense path keeps 13 bytes per score: dsa_kernel_backend = tilelang or cudnn "
            "runs the sparse kernels"
        )
    return text + "."
