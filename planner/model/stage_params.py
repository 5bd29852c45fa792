"""Parameters one GPU of a pipeline rank holds, dense and expert: its decoder layers by kind (TP /
EP x expert-TP split, but for what Megatron-Core keeps whole on every TP rank,
`params.replicated_params`), the embedding on the first rank, the output layer and final norm on the
last, the MTP layers (with the embedding copy Megatron builds for them) on theirs;
and how many of them are FP8 GEMM weights. `planner.model.memory` turns them into bytes."""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import params, t5, vision
from planner.model.bf16_layers import bf16_ranges
from planner.model.job_memo import ModelMemo
from planner.model.mtp_precision import mtp_quantised
from planner.model.schedule import Chunks

_EDGES: ModelMemo[int, tuple[int, int, int, tuple[int, int]]] = ModelMemo()


def _edge_params(arch: ModelArch, vocab: int) -> tuple[int, int, int, tuple[int, int]]:
    """(word embedding, position embedding, output layer incl. final norm, MTP split)."""
    return _EDGES.get(arch, vocab, lambda: _edge_params_of(arch, vocab))


def _edge_params_of(arch: ModelArch, vocab: int) -> tuple[int, int, int, tuple[int, int]]:
    words = vocab * arch.hidden_size
    positions = params.embedding_params(arch, vocab) - words
    out = params.output_params(arch, vocab) or words  # tied: the last stage keeps a copy
    return words, positions, out, params.mtp_layer_params(arch)


def decoder_params(job: Job, layout: Layout, chunks: Chunks) -> tuple[float, float]:
    """(dense, expert) parameters of some decoder layers (a rank's chunks) on one GPU (TP / EP x
    expert-TP split, but for what every TP rank holds whole, `params.replicated_params`), each
    layer's by its kind (`params.kind_table`)."""
    counts = job.arch.kind_counts(chunks)
    table = params.kind_table(job.arch)
    whole = params.replicated_table(job.arch)
    dense = sum(n * (d - w) for n, (d, _), w in zip(counts, table, whole, strict=True)) / layout.tp
    dense += sum(n * w for n, w in zip(counts, whole, strict=True))
    expert = sum(n * e for n, (_, e) in zip(counts, table, strict=True))
    return dense, expert / (layout.ep * layout.expert_tp)


def _mtp_params(job: Job, layout: Layout) -> tuple[float, float]:
    """(dense, expert) parameters of the MTP layers on one GPU of the rank that holds them (TP /
    EP x expert-TP split, but for what every TP rank holds whole)."""
    mtp_dense, mtp_expert = _edge_params(job.arch, job.arch.padded_vocab(layout.tp))[3]
    whole = params.mtp_replicated_params(job.arch)  # what every TP rank holds whole
    return (mtp_dense - whole) / layout.tp + whole, mtp_expert / (layout.ep * layout.expert_tp)


def stage_params(job: Job, layout: Layout, rank: int, chunks: Chunks) -> tuple[float, float]:
    """(dense, expert) parameters one GPU of pipeline rank `rank` (its decoder layers `chunks`)
    holds: the embedding (and a vision encoder, `planner.model.vision`) on rank 0, the output
    layer and final norm on the last stage's rank (`Layout.output_rank`: rank 0 in torchtitan's
    V), the MTP layers on the rank whose last chunk holds them (`Layout.mtp_rank`) with the word
    embedding they embed their input with (Megatron builds it wherever MTP runs, gpt_model.py
    `pre_process or mtp_process`), but no output layer: on a stage before the loss stage
    (Megatron's `mtp_standalone`) the loss stage's output layer computes their logits.
    Remembered per model and per what it reads
    besides the model (the degrees that split the parameters, pp, the output and MTP ranks, the
    rank and its chunks, the vision or T5 encoder): the search asks for the same stages of
    thousands of layouts."""
    key = _key(job, layout, rank, chunks)
    return _STAGE_PARAMS.get(job.arch, key, lambda: _stage_params(job, layout, rank, chunks))


def _key(job: Job, lay: Layout, rank: int, chunks: Chunks) -> tuple[object, ...]:
    """What a rank's parameters read besides the model (`stage_params`)."""
    mtp = lay.mtp_rank(job.arch.num_layers, job.arch.mtp_num_layers)
    encoders = (job.vision_encoder, job.t5_encoder)
    return (lay.tp, lay.ep, lay.expert_tp, lay.pp, lay.output_rank, mtp, rank, chunks, encoders)


_STAGE_PARAMS: ModelMemo[tuple[object, ...], tuple[float, float]] = ModelMemo()
_CHUNK_PARAMS: ModelMemo[tuple[object, ...], tuple[tuple[float, float], ...]] = ModelMemo()


def _stage_params(job: Job, layout: Layout, rank: int, chunks: Chunks) -> tuple[float, float]:
    dense, expert = decoder_params(job, layout, chunks)
    first, (last_d, last_e) = edge_params(job, layout, rank)
    return dense + first + last_d, expert + last_e


def chunk_params(job: Job, layout: Layout, rank: int, chunks: Chunks) -> tuple[Pair, ...]:
    """(dense, expert) parameters one GPU of pipeline rank `rank` holds in each of its model
    chunks `chunks`: each chunk's decoder layers, the first chunk's embedding and the last
    chunk's output layer and MTP layers (`edge_params`). They sum to `stage_params`.
    Remembered as `stage_params` is."""
    key = _key(job, layout, rank, chunks)
    return _CHUNK_PARAMS.get(job.arch, key, lambda: _chunk_params(job, layout, rank, chunks))


def _chunk_params(job: Job, layout: Layout, rank: int, chunks: Chunks) -> tuple[Pair, ...]:
    edges = edge_params(job, layout, rank)
    out = []
    for c, chunk in enumerate(chunks):
        dense, expert = decoder_params(job, layout, (chunk,))
        if c == 0:
            dense += edges[0]
        if c == len(chunks) - 1:
            dense, expert = dense + edges[1][0], expert + edges[1][1]
        out.append((dense, expert))
    return tuple(out)


Pair = tuple[float, float]
"""(dense, expert) parameters."""


def edge_params(job: Job, layout: Layout, rank: int) -> tuple[float, Pair]:
    """What rank `rank` holds besides its decoder layers, per GPU: the dense parameters of its
    first model chunk's embedding (rank 0: Megatron builds it with pre_process, which only the
    first virtual stage of the first pipeline rank has, Megatron-LM d98e8a64
    training.py:2389-2399), and the (dense, expert) parameters of its last chunk's output layer
    (post_process: the last virtual stage) and MTP layers (always in the last virtual stage of
    their rank, pipeline_parallel_layer_layout.py:120-126)."""
    arch = job.arch
    words, positions, out, _ = _edge_params(arch, arch.padded_vocab(layout.tp))
    first = dense = expert = 0.0
    if rank == 0:
        # word embeddings are split over tp; learned position embeddings are not; a vision
        # encoder (LLaVA) sits before them
        first += words / layout.tp + positions + vision.encoder_params(job, layout.tp)
        first += t5.encoder_params(job, layout.tp)  # pp 1: with every decoder layer
    if rank == layout.output_rank:  # the last stage's rank (rank 0 in torchtitan's V)
        # untied: the output layer; tied with pp > 1: Megatron keeps a copy of the embedding
        if layout.pp > 1 or arch.untie_embeddings_and_output_weights:
            dense += out / layout.tp
        dense += params.final_norm_params(arch)
    if rank == layout.mtp_rank(arch.num_layers, arch.mtp_num_layers):
        mtp_dense, mtp_expert = _mtp_params(job, layout)
        dense += mtp_dense
        expert += mtp_expert
        if rank != 0:  # the MTP rank's own LanguageModelEmbedding (Megatron-LM d98e8a64
            # gpt_model.py:173-181): its word embeddings split over tp, its learned position
            # embeddings (language_model_embedding.py:47,71) whole
            dense += words / layout.tp + positions
        # no output layer of its own: Megatron builds it on the loss stage alone
        # (gpt_model.py:255 `if self.post_process`), which computes every depth's logits
        # (:746 process_mtp_loss) from the hidden states the MTP stage sends it (:728)
    return first, (dense, expert)


def quantised_decoder_params(job: Job, layout: Layout, chunks: Chunks) -> tuple[float, float]:
    """(dense, expert) parameters of some decoder layers that are FP8 / NVFP4 GEMM weights: all
    but those of the layers kept in bf16 (`bf16_layers`); none in a bf16 or fp32 job."""
    if not job.quantised:
        return 0.0, 0.0
    dense, expert = decoder_params(job, layout, chunks)
    bf16_dense, bf16_expert = decoder_params(job, layout, bf16_ranges(job, chunks))
    return dense - bf16_dense, expert - bf16_expert


def quantised_params(job: Job, layout: Layout, rank: int, chunks: Chunks) -> tuple[float, float]:
    """(dense, expert) parameters of rank `rank` that are FP8 / NVFP4 GEMM weights: its decoder
    layers' (`quantised_decoder_params`; their norms and router counted in, a few thousandths)
    and its MTP layers' where they run quantised (`mtp_precision.mtp_quantised`)."""
    if not job.quantised:
        return 0.0, 0.0
    arch = job.arch
    dense, expert = quantised_decoder_params(job, layout, chunks)
    if mtp_quantised(job) and rank == layout.mtp_rank(arch.num_layers, arch.mtp_num_layers):
        mtp_dense, mtp_expert = _mtp_params(job, layout)
        dense += mtp_dense
        expert += mtp_expert
    return dense, expert


def output_params(arch: ModelArch, vocab: int) -> int:
    """Parameters of the output layer with its final norm (a tied model's copy of the word
    embedding) at a padded vocabulary."""
    return _edge_params(arch, vocab)[2]
