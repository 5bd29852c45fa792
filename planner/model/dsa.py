"""DeepSeek sparse attention (DSA: DeepSeek-V3.2, GLM-5) as Megatron-LM trains it: which kernels
run (`backend`, `loss_mode`), the keys each query's attention works over, what one attention block
keeps for its backward (`block_bytes`) and what it holds while it runs (`working_bytes`), and the
indexer's parameters. Its time is `planner.model.dsa_time`.

Megatron-LM d98e8a64 (megatron/core/transformer/experimental_attention_variant/: dsa.py,
absorbed_mla.py, dsa_masking.py, dsa_kernels.py, ops/sparse_mla.py, ops/indexer.py,
dsa_cudnn_kernels.py). Every DSA layer is an AbsorbedMLASelfAttention: the MLA down-projections,
latent norms and q_up as in MLA, but kv_up's weight is never run as a layer: each query head's
non-rope part q_nope (d_qk wide) is multiplied into the kv latent (W_uk: r_kv = kv_lora_rank wide)
and joined by its rope part, a query of r_kv + d_r (576 for DeepSeek-V3.2) against ONE key, the
normed kv latent and the rope key (576 wide, all heads share it: the latent is all-gathered to the
whole sequence on every TP rank); the attention's output is latent (r_kv, 512 wide), turned into
each head's value (d_v) by W_uv before the output projection. A lightning indexer (wq_b from the
q latent, n_i heads of d_i; wk from the hidden state, one head of d_i with a LayerNorm;
weights_proj, n_i head weights; all three duplicated on every TP rank, run on the whole sequence)
scores every earlier key, and each query attends to its top k.

Kernels (`Job.dsa_kernel_backend`, Megatron --dsa-kernel-backend; `backend` says which runs):
- "none" (Megatron's default): the unfused PyTorch path, DENSE: fp32 scores [b, heads, s, s]
  over every key (the top-k and causal bounds are masks), softmax, a bf16 copy for the value
  product. It keeps 13 bytes per score (the softmax's fp32 exponentials and numerator, the bf16
  probabilities, three boolean masks: SCORE_KEPT_BYTES) and fp32 copies of the query and the
  key. The indexer scores every key in fp32 too ([s, n_i, s] per sequence).
- "tilelang": TileLang's sparse MLA over the top k (int32 indices), padded to at least
  TILELANG_MIN_HEADS heads; it keeps the query, the latent key and the indices and recomputes its
  forward in the backward. It runs only for 576 / 512-wide queries and latents, a power-of-two
  head count (after the padding), k a multiple of 64 and bf16 operands; otherwise Megatron falls
  back to "none" silently (`backend`).
- "cudnn": FlashMLA's forward and cuDNN's sparse backward, heads padded (CUDNN_HEAD_ALIGN); it
  keeps the latent output, its fp32 log-sum-exp and int32 indices (k padded to a multiple of
  512), no recompute. Needs a 512-wide latent value and a head count it takes, else "none".
The indexer runs without autograd and keeps nothing unless its KL loss is on
(`Job.dsa_indexer_loss_coeff` > 0, `loss_mode`): "dense" (backend none, or tilelang without
--dsa-indexer-use-sparse-loss) recomputes dense fp32 attention scores over every causal key in
its forward and again in its backward; "sparse" (tilelang) streams over the top k; "fused"
(cudnn) computes the indexer's gradients in the forward and keeps them.
Context parallelism runs DSA only with the all-gather exchange: queries local, the key and the
indexer key gathered to the whole sequence.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal, Protocol, TypedDict

from planner.inputs.arch import ModelArch
from planner.inputs.plan_types import DsaKernelBackend

if TYPE_CHECKING:
    from planner.inputs.plan import Job

LossMode = Literal["off", "dense", "sparse", "fused"]

TILELANG_MIN_HEADS = 16
"""TileLang's sparse MLA pads the local query heads to at least 16 (ops/tilelang_dsa.py)."""
TILELANG_K_MULTIPLE = 64
"""It takes only a top-k that is a multiple of 64 (ops/tilelang_dsa.py)."""
CUDNN_HEAD_ALIGN = {False: (64,), True: (64, 128)}
"""The local query-head counts FlashMLA's sparse kernel runs (dsa_cudnn_kernels.py
`_flash_mla_head_padding`), on Hopper (False) and on Blackwell (True): fewer heads are padded up
to the first of these they divide, more must be a multiple of the last; other counts decline
to the PyTorch path (`cudnn_heads`)."""
CUDNN_K_MULTIPLE = 512
"""cuDNN's top-k indices are padded to a multiple of 512 (dsa_cudnn_kernels.py)."""
SCORE_KEPT_BYTES = 13.0
"""Backend "none": bytes each fp32 score of [b, heads, s, s] leaves saved for the backward
(dsa_masking.masked_softmax and the value product: the exponentials and the numerator in fp32,
4 + 4, the probabilities' bf16 copy, 2, three boolean masks, 1 each)."""
SCORE_WORKING_BYTES = 12.0
"""Backend "none": what the scores hold beyond that while the layer runs (three fp32 copies
alive at once: the product, its scaled and masked copies; the backward's gradients alike)."""
INDEX_MASK_BYTES = 8.0
"""Backend "none": the fp32 index mask [b, s, s] and its causal copy, per query-key pair."""
NAIVE_INDEX_BYTES = 4.0
"""The PyTorch indexer's fp32 einsum output [s, n_i, s] per head and pair (dsa.py
`_compute_index_scores`), before the head-weighted sum."""
TILELANG_INDEX_ROWS = 8192
"""The TileLang indexer scores 8,192 queries at a time (fp32 logits [rows, s] per batch row)."""
CUDNN_SCORE_CHUNK = float(2**30)
"""cuDNN's indexer scores are chunked to 1 GiB of fp32 (dsa_cudnn_kernels.py)."""
CUDNN_TOPK_SCRATCH = float(2**31)
"""And its top-k scratch is capped at 2 GiB."""


def widths(arch: ModelArch) -> tuple[int, int]:
    """(query / key width, latent value width) of the absorbed attention: r_kv + d_r and r_kv."""
    assert arch.kv_lora_rank is not None and arch.qk_pos_emb_head_dim is not None
    return arch.kv_lora_rank + arch.qk_pos_emb_head_dim, arch.kv_lora_rank


def indexer_dims(arch: ModelArch) -> tuple[int, int, int]:
    """(n_i heads, d_i head dim, top k) of the lightning indexer."""
    assert arch.dsa_indexer_n_heads and arch.dsa_indexer_head_dim and arch.dsa_indexer_topk
    return arch.dsa_indexer_n_heads, arch.dsa_indexer_head_dim, arch.dsa_indexer_topk


def indexer_params(arch: ModelArch) -> int:
    """One layer's indexer: wq_b (r_q -> n_i d_i), wk (h -> d_i), the key's LayerNorm (weight and
    bias) and weights_proj (h -> n_i); every TP rank holds them whole. 0 without DSA."""
    if not arch.has_dsa:
        return 0
    n_i, d_i, _ = indexer_dims(arch)
    h, r_q = arch.hidden_size, arch.q_lora_rank or arch.hidden_size
    return r_q * n_i * d_i + h * d_i + 2 * d_i + h * n_i


def cudnn_heads(heads: int, blackwell: bool) -> int | None:
    """The heads FlashMLA computes for `heads` local query heads (CUDNN_HEAD_ALIGN), or None
    where it declines them."""
    aligns = CUDNN_HEAD_ALIGN[blackwell]
    for align in aligns:
        if heads <= align and align % heads == 0:
            return align
    return heads if heads % aligns[-1] == 0 else None


def backend(job: Job, tp: int) -> DsaKernelBackend:
    """The kernels that run: the requested backend where it takes the layer's shapes, else the
    PyTorch path Megatron falls back to (module docstring)."""
    arch, asked = job.arch, job.dsa_kernel_backend
    q_w, v_w = widths(arch)
    if asked == "tilelang":
        heads = max(arch.num_attention_heads // tp, TILELANG_MIN_HEADS)
        fits = q_w == 576 and v_w == 512 and heads & (heads - 1) == 0
        k = indexer_dims(arch)[2]
        if fits and k % TILELANG_K_MULTIPLE == 0 and not job.attention_in_fp8:
            return "tilelang"
        return "none"
    if asked == "cudnn":
        padded = cudnn_heads(arch.num_attention_heads // tp, job.cluster.gpu.is_blackwell)
        return "cudnn" if v_w == 512 and padded is not None else "none"
    return "none"


def fallback(job: Job, tp: int) -> str | None:
    """Why the requested fused kernels do not run (Megatron then runs the PyTorch path without a
    word), or None where they do or none were asked for."""
    asked = job.dsa_kernel_backend
    if asked == "none" or backend(job, tp) == asked:
        return None
    arch = job.arch
    q_w, v_w = widths(arch)
    if asked == "cudnn" and v_w != 512:
        return f"cuDNN's sparse attention needs a 512-wide latent value (kv_lora_rank {v_w})"
    if asked == "cudnn":
        local = arch.num_attention_heads // tp
        return f"FlashMLA's sparse kernel takes no {local} heads a rank on this GPU"
    heads = max(arch.num_attention_heads // tp, TILELANG_MIN_HEADS)
    if (q_w, v_w) != (576, 512):
        return f"TileLang's sparse MLA needs 576 / 512-wide queries and latents (got {q_w} / {v_w})"
    if heads & (heads - 1):
        return f"TileLang's sparse MLA needs a power-of-two head count a rank (got {heads})"
    if job.attention_in_fp8:
        return "TileLang's sparse MLA runs bf16 operands only (fp8_attention is on)"
    k = indexer_dims(arch)[2]
    return f"TileLang's sparse MLA needs a top-k that is a multiple of 64 (got {k})"


def loss_mode(job: Job, kernels: DsaKernelBackend) -> LossMode:
    """How the indexer's KL loss runs with these kernels (module docstring); "off" at weight 0."""
    if job.dsa_indexer_loss_coeff <= 0:
        return "off"
    if kernels == "cudnn":
        return "fused"
    if kernels == "tilelang" and job.dsa_indexer_use_sparse_loss:
        return "sparse"
    return "dense"


def local_heads(
    arch: ModelArch, tp: int, kernels: DsaKernelBackend, blackwell: bool = False
) -> float:
    """Query heads one TP rank's kernel computes (padded by the fused kernels)."""
    heads = arch.num_attention_heads / tp
    if kernels == "tilelang":
        return max(heads, TILELANG_MIN_HEADS)
    if kernels == "cudnn":
        return float(cudnn_heads(arch.num_attention_heads // tp, blackwell) or heads)
    return heads


def key_slots(arch: ModelArch, s: int, kernels: DsaKernelBackend) -> float:
    """Keys each query's attention kernel works over, on average, for a sequence of s keys: every
    key ("none", dense); TileLang's every top-k slot, the early queries' empty ones too (k, at most
    s, padded to 64); FlashMLA's valid ones (min(i, k) for the i-th query, averaged)."""
    k = min(indexer_dims(arch)[2], s)
    if kernels == "none":
        return float(s)
    if kernels == "tilelang":
        return float(math.ceil(k / TILELANG_K_MULTIPLE) * TILELANG_K_MULTIPLE)
    return k - k * (k - 1) / (2.0 * s)  # mean of min(i, k) over i = 1..s


def index_slots(arch: ModelArch, s: int, kernels: DsaKernelBackend) -> float:
    """The top-k indices each query keeps (k, at most the s keys), as the kernels store them."""
    k = min(indexer_dims(arch)[2], s)
    if kernels == "cudnn":
        return float(math.ceil(k / CUDNN_K_MULTIPLE) * CUDNN_K_MULTIPLE)
    if kernels == "tilelang":
        return float(math.ceil(k / TILELANG_K_MULTIPLE) * TILELANG_K_MULTIPLE)
    return float(k)


class Shard(Protocol):
    """What the DSA bytes read of a layer's shard (`planner.model.shard.Shard`, which
    `shard_fields` fills for a DSA model)."""

    @property
    def tokens(self) -> int: ...
    @property
    def tp(self) -> int: ...
    @property
    def micro_batch_size(self) -> int: ...
    @property
    def seq_per_cp_rank(self) -> int: ...
    @property
    def seq_length(self) -> int: ...
    @property
    def dsa_kernels(self) -> DsaKernelBackend: ...
    @property
    def dsa_loss(self) -> LossMode: ...
    @property
    def dsa_heads(self) -> float: ...
    def drops(self, module: str) -> bool: ...


def _shape(arch: ModelArch, sh: Shard) -> tuple[float, int, int, int, DsaKernelBackend, float]:
    """(t local queries, s keys a sequence, mbs sequences, tp, the kernels, the heads they compute
    a rank) of a layer's shard: context parallelism gathers the keys (`Shard.seq_length`)."""
    kernels = sh.dsa_kernels
    padded = sh.dsa_heads or local_heads(arch, sh.tp, kernels)
    s = sh.seq_length or sh.seq_per_cp_rank
    return sh.tokens, s, sh.micro_batch_size, sh.tp, kernels, padded


def block_bytes(arch: ModelArch, sh: Shard) -> tuple[float, float]:
    """(by the heads, whole on every TP rank): bytes the absorbed attention and the indexer keep
    for the backward on one TP rank of the shard (its kernels, indexer loss and padded heads:
    `shard_fields`), beyond MLA's latents and their norms (`activations`): split over the heads,
    q_nope for W_uk's gradient, the latent output for W_uv's and the backend's saved query,
    scores or log-sum-exp; whole, the gathered latent key, the indices and the indexer's saved
    inputs. Selective recompute: core_attn recomputes the whole sparse attention and its
    indexer from its inputs, the absorbed query and the key; mla_up_proj (absorbed_mla.py's
    CheckpointWithoutOutput) frees q_nope, the absorbed query and the key once the attention has
    run and rebuilds them for the backward, so the kernels' saved views of them hold nothing
    (backend none's fp32 copies stay, and TileLang's padded or batch-major copies and the
    CP-gathered key: `tilelang_inputs`)."""
    assert arch.qk_head_dim is not None
    t, s, mbs, tp, kernels, padded = _shape(arch, sh)
    q_w, v_w = widths(arch)
    n_i, d_i, _ = indexer_dims(arch)
    h, r_q = arch.hidden_size, arch.q_lora_rank or arch.hidden_size
    heads = arch.num_attention_heads / tp
    keys = float(s * mbs)  # the keys of the micro-batch's sequences, gathered
    views = 0.0 if sh.drops("mla_up_proj") else 2.0  # bytes a kept view of q or the key holds
    part = views * t * heads * arch.qk_head_dim  # q_nope, W_uk's input
    whole = views * keys * q_w  # the all-gathered latent key (the value is its first r_kv)
    if sh.drops("core_attn"):
        return part + views * t * heads * q_w, whole  # the checkpoint keeps its inputs
    part += 2.0 * t * heads * v_w  # W_uv's input
    if kernels == "none":
        part += 4.0 * t * heads * q_w + scores_kept(arch, sh)  # the fp32 query, the scores
        whole += 4.0 * keys * q_w  # the key's fp32 copy
    elif kernels == "tilelang":
        query, whole = tilelang_inputs(arch, sh)
        part += query + t * padded  # the query (and its copies), the head mask
        whole += 4.0 * t * index_slots(arch, s, kernels)
    else:
        part += views * t * padded * q_w + 4.0 * t * padded + 2.0 * t * (padded - heads) * v_w
        whole += 4.0 * t * index_slots(arch, s, kernels)
    if sh.dsa_loss == "off":
        return part, whole
    whole += 2.0 * t * (h + r_q + d_i)  # the indexer's gathered inputs and its key norm's input
    k = min(indexer_dims(arch)[2], s)
    if sh.dsa_loss == "dense":
        # q, weights and the top k on the local queries; k, the indexer key, gathered under CP
        whole += t * (2.0 * n_i * d_i + 2.0 * n_i + 8.0 * k) + 2.0 * keys * d_i
        if kernels == "none":
            part += views * t * heads * q_w  # the loss keeps (a view of) the absorbed query
    elif sh.dsa_loss == "sparse":
        whole += t * (2.0 * n_i * d_i + 2.0 * d_i + 4.0 * n_i + (4 + 1 + 4) * k)
        whole += 8.0 * t * k if tp > 1 else 0.0  # the sorted int64 copy under TP
    else:
        whole += 2.0 * t * (n_i * d_i + d_i + n_i)  # the gradients cuDNN computed forward
    return part, whole


def tilelang_inputs(arch: ModelArch, sh: Shard) -> tuple[float, float]:
    """(query, key) bytes TileLang's sparse MLA leaves alive for the backward on one TP rank:
    SparseMLA saves the query and key it runs (ops/sparse_mla.py:69), which
    ops/tilelang_dsa.py:798-803 makes by `.permute(1, 0, 2, 3).contiguous()` (a copy when mbs > 1)
    and, under 16 heads a rank, F.pad (a padded copy). Copies outlive mla_up_proj's discard
    (absorbed_mla.py:906 frees only its outputs' storage, with every view of it); so does the
    key context parallelism gathers (dsa.py:1835, :1856). The dense indexer loss also keeps the
    original query and key (dsa.py:2013-2020, saved at :944)."""
    t, s, mbs, tp, _, padded = _shape(arch, sh)
    q_w = widths(arch)[0]
    heads = arch.num_attention_heads / tp
    q_copy, k_copy = padded > heads or mbs > 1, mbs > 1
    k_new = bool(sh.seq_length) and sh.seq_length > sh.seq_per_cp_rank  # the CP-gathered key
    kept = not sh.drops("mla_up_proj")  # the checkpoint's outputs (views of them too) stay
    loss = sh.dsa_loss == "dense"
    query = 2.0 * t * padded * q_w if q_copy else 0.0
    if kept and (loss or not q_copy):
        query += 2.0 * t * heads * q_w  # the attention's own query
    keys = 2.0 * s * mbs * q_w
    key = keys if k_copy else 0.0
    if (kept or k_new) and (loss or not k_copy):
        key += keys  # the attention's own key
    return query, key


def scores_kept(arch: ModelArch, sh: Shard) -> float:
    """Of `block_bytes`, backend none's saved scores (0 for the fused kernels): the elementwise
    passes over them are timed by `planner.model.dsa_time` (DENSE_SOFTMAX_BYTES), not as saved
    activations."""
    if sh.dsa_kernels != "none":
        return 0.0
    t, s, _, tp, _, _ = _shape(arch, sh)
    return SCORE_KEPT_BYTES * t * arch.num_attention_heads / tp * s


def working_bytes(arch: ModelArch, sh: Shard) -> float:
    """Bytes one DSA layer holds beyond what it keeps while its forward or backward runs on one
    TP rank of the shard: the larger of the indexer's scores (every key in fp32 per head on the
    PyTorch path, TileLang's 8,192-row blocks, cuDNN's capped chunk and top-k scratch), the dense
    path's score copies and index masks, and the dense indexer loss's fp32 attention scores, key
    copies and index einsum."""
    t, s, mbs, tp, kernels, padded = _shape(arch, sh)
    q_w, _ = widths(arch)
    n_i = indexer_dims(arch)[0]
    heads = arch.num_attention_heads / tp
    pairs = t * s
    if kernels == "none":
        index = NAIVE_INDEX_BYTES * (n_i + 1) * pairs
        attention = SCORE_WORKING_BYTES * heads * pairs + INDEX_MASK_BYTES * pairs
    elif kernels == "tilelang":
        index = 4.0 * min(TILELANG_INDEX_ROWS, t / mbs) * s  # one batch row's block
        attention = 2.0 * t * padded * q_w + 4.0 * s * mbs * q_w
    else:
        index = min(4.0 * pairs, CUDNN_SCORE_CHUNK) + min(8.0 * pairs, CUDNN_TOPK_SCRATCH)
        attention = 0.0
    out = max(index, attention)
    if sh.dsa_loss == "dense":
        dense = SCORE_WORKING_BYTES * heads * pairs + NAIVE_INDEX_BYTES * (n_i + 1) * pairs
        out = max(out, dense + 6.0 * heads * q_w * s * mbs)
    return out


class ShardFields(TypedDict, total=False):
    dsa_kernels: DsaKernelBackend
    dsa_loss: LossMode
    dsa_heads: float
    seq_length: int


def shard_fields(job: Job, tp: int) -> ShardFields:
    """The `shard.Shard` fields a DSA model's activations read (the kernels that run, the
    indexer loss, the heads they compute a rank, the whole sequence); none for another
    model."""
    if not job.arch.has_dsa:
        return {}
    kernels = backend(job, tp)
    loss = loss_mode(job, kernels)
    heads = local_heads(job.arch, tp, kernels, job.cluster.gpu.is_blackwell)
    return {
        "dsa_kernels": kernels,
        "dsa_loss": loss,
        "dsa_heads": heads,
        "seq_length": job.seq_length,
    }
