"""A Job from catalog names, built directly (no plan file), for the model tests (pytest puts
tests/ on sys.path)."""

from __future__ import annotations

from planner.inputs import catalog, megatron_args
from planner.inputs.hardware import ClusterSpec
from planner.inputs.plan import Job, parse_plan

TINY_LINE = (
    "--num-layers 12 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
    "--max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 32 --bf16 "
    "--vocab-size 50304"
)
"""A Megatron-LM functional test's 12-layer model as a command line."""

TINY_DSA: dict[str, object] = {
    "name": "tiny-dsa",
    "num_layers": 4,
    "hidden_size": 1024,
    "ffn_hidden_size": 4096,
    "num_attention_heads": 16,
    "vocab_size": 32000,
    "gated_linear_unit": True,
    "activation": "swiglu",
    "normalization": "RMSNorm",
    "add_bias_linear": False,
    "position_embedding_type": "rope",
    "multi_latent_attention": True,
    "q_lora_rank": 512,
    "kv_lora_rank": 512,
    "qk_head_dim": 128,
    "qk_pos_emb_head_dim": 64,
    "v_head_dim": 128,
    "qk_layernorm": True,
    "dsa_indexer_n_heads": 64,
    "dsa_indexer_head_dim": 128,
    "dsa_indexer_topk": 2048,
}
"""A 4-layer MLA model with DeepSeek-V3.2's attention widths and indexer, as a plan's model
table (the DSA launch and rule tests)."""


def job(model: str, gpu: str, n: int, seq: int, gbs: int, **kw: object) -> Job:
    """`model` on `n` of `gpu` (its catalog node size, memory and tiers), sequences of `seq`,
    `gbs` per step; `kw` sets Job's other fields."""
    g = catalog.get_gpu(gpu)
    cluster = ClusterSpec(
        gpu=g, num_gpus=n, gpus_per_node=g.gpus_per_node, memory_gib=g.memory_gib, tiers=g.tiers
    )
    return Job(
        arch=catalog.get_model(model),
        cluster=cluster,
        seq_length=seq,
        global_batch_size=gbs,
        **kw,  # type: ignore[arg-type]
    )


def h100_cluster(num_gpus: int) -> ClusterSpec:
    """`num_gpus` H100 SXM in nodes of 8, the catalog's memory and link tiers."""
    gpu = catalog.get_gpu("h100-sxm-80gb")
    return ClusterSpec(
        gpu=gpu, num_gpus=num_gpus, gpus_per_node=8, memory_gib=gpu.memory_gib, tiers=gpu.tiers
    )


def read_job(extra: str = "") -> Job:
    """The Job `planner check --megatron-args` reads from TINY_LINE plus `extra`, on 8 H100."""
    return parse_plan(megatron_args.read(TINY_LINE + extra, "h100-sxm-80gb", 8, "t").doc).job
