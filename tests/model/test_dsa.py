"""DeepSeek sparse attention (DSA) on DeepSeek-V3.2's attention shape, by hand: which kernels run,
the keys each query's kernel works over, the indexer's parameters, what one attention block keeps
and holds while it runs, its time's parts, and the gate's verdicts on the three backends.

Oracle: hand arithmetic from Megatron-LM d98e8a64 megatron/core/transformer/
experimental_attention_variant/ (dsa.py `_unfused_absorbed_dsa_fn` and `DSAIndexer`,
dsa_masking.py `masked_softmax`, ops/sparse_mla.py `SparseMLA`, ops/tilelang_dsa.py's
conditions, dsa_cudnn_kernels.py's paddings), written out in the comments independently of
planner.model.dsa. DeepSeek-V3.2's shape: 128 heads, q_lora_rank 1536, kv_lora_rank 512, rope 64,
qk_head_dim 128, v_head_dim 128, hidden 7168; indexer 64 heads of 128, top 2,048 (its HF config,
and the DSv3.2-shaped parity helper of Megatron-LM's unit tests).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from planner.inputs.arch import ModelArch
from planner.inputs.plan import Job, parse_plan
from planner.inputs.plan_types import DsaKernelBackend
from planner.model import dsa, dsa_time, memory, params
from planner.model.layer_time import gpu_of
from planner.model.shard import Shard

ZOO = Path(__file__).resolve().parents[2] / "model_zoo" / "deepseek-v3.toml"


def _model(**update: object) -> dict[str, object]:
    """DeepSeek-V3's zoo table with DSv3.2's indexer (the zoo file read as a plan's model table)."""
    import tomllib

    table = tomllib.loads(ZOO.read_text())
    table.update(
        name="dsv32-shape",
        dsa_indexer_n_heads=64,
        dsa_indexer_head_dim=128,
        dsa_indexer_topk=2048,
    )
    table.update(update)
    return table


def _job(
    backend: str = "tilelang", seq: int = 4096, gpu: str = "h100-sxm-80gb", **training: object
) -> Job:
    doc = {
        "model": _model(),
        "cluster": {"gpu": gpu, "num_gpus": 8},
        "training": {
            "seq_length": seq,
            "global_batch_size": 8,
            "dsa_kernel_backend": backend,
            **training,
        },
        "parallel": {"tp": 8, "sequence_parallel": True, "micro_batch_size": 1},
    }
    return parse_plan(doc, ZOO).job


def _shard(kernels: DsaKernelBackend, **kw: Any) -> Shard:
    """One micro-batch of 4,096 tokens (the whole sequence) on a rank of tp 8."""
    return Shard(tokens=4096, tp=8, seq_per_cp_rank=4096, dsa_kernels=kernels, **kw)


def _arch(**update: object) -> ModelArch:
    return _job().arch.model_copy(update=update)


def test_indexer_parameters_by_hand() -> None:
    # wq_b 1536 x 64 x 128 = 12,582,912; wk 7168 x 128 = 917,504; its LayerNorm 2 x 128 = 256;
    # weights_proj 7168 x 64 = 458,752: 13,959,424 a layer, every TP rank whole
    arch = _arch()
    assert dsa.indexer_params(arch) == 13_959_424
    dense = arch.model_copy(
        update={"dsa_indexer_n_heads": None, "dsa_indexer_head_dim": None, "dsa_indexer_topk": None}
    )
    assert params.attention_params(arch) - params.attention_params(dense) == 13_959_424
    assert params.replicated_params(arch, False) - params.replicated_params(dense, False) == (
        13_959_424
    )


def test_which_kernels_run() -> None:
    # TileLang: 576 / 512 widths, a power-of-two head count after padding to 16, k % 64 == 0,
    # bf16 operands; else Megatron falls back to the PyTorch path silently
    job = _job("tilelang")
    assert dsa.backend(job, 8) == "tilelang"  # 16 heads a rank
    assert dsa.backend(job, 16) == "tilelang"  # 8 heads, padded to 16
    odd = _job("tilelang")
    odd = Job(**{**odd.__dict__, "arch": odd.arch.model_copy(update={"num_attention_heads": 96})})
    assert dsa.backend(odd, 2) == "none"  # 48 heads: not a power of two
    k100 = Job(**{**job.__dict__, "arch": job.arch.model_copy(update={"dsa_indexer_topk": 2000})})
    assert dsa.backend(k100, 8) == "none"  # 2000 is not a multiple of 64
    # cuDNN needs a 512-wide latent value
    assert dsa.backend(_job("cudnn"), 8) == "cudnn"
    narrow = _job("cudnn")
    narrow = Job(
        **{**narrow.__dict__, "arch": narrow.arch.model_copy(update={"kv_lora_rank": 256})}
    )
    assert dsa.backend(narrow, 8) == "none"
    assert dsa.backend(_job("none"), 8) == "none"


def test_the_indexer_loss_modes() -> None:
    assert dsa.loss_mode(_job("tilelang"), "tilelang") == "off"  # coefficient 0: frozen indexer
    on = {"dsa_indexer_loss_coeff": 0.01}
    assert dsa.loss_mode(_job("none", **on), "none") == "dense"
    assert dsa.loss_mode(_job("tilelang", **on), "tilelang") == "dense"  # not the sparse one
    sparse = _job("tilelang", dsa_indexer_use_sparse_loss=True, **on)
    assert dsa.loss_mode(sparse, "tilelang") == "sparse"
    assert dsa.loss_mode(_job("cudnn", **on), "cudnn") == "fused"


def test_key_slots_by_hand() -> None:
    arch = _arch()
    assert dsa.key_slots(arch, 4096, "none") == 4096  # dense: every key
    assert dsa.key_slots(arch, 4096, "tilelang") == 2048  # every slot, the early queries' too
    # FlashMLA's valid keys: mean of min(i, 2048), i = 1..4096: 2048 - 2048 x 2047 / 8192
    assert dsa.key_slots(arch, 4096, "cudnn") == pytest.approx(2048 - 2048 * 2047 / 8192)
    # at 1,000 keys k is 1,000, TileLang's slots padded to 1,024; the mean of i over 1..1000
    assert dsa.key_slots(arch, 1000, "tilelang") == 1024
    assert dsa.key_slots(arch, 1000, "cudnn") == pytest.approx(500.5)


def test_the_dense_path_keeps_3_65_gb_a_layer_at_tp_8() -> None:
    # backend none, 16 heads a rank, 4,096 queries over 4,096 keys: 13 bytes a score
    # (13 x 16 x 4096^2 = 3,489,660,928), the fp32 query (4 x 16 x 4096 x 576 = 150,994,944) and
    # key (4 x 4096 x 576 = 9,437,184): 3,650,093,056, beside W_uv's input (2 x 16 x 4096 x 512 =
    # 67,108,864), q_nope (2 x 16 x 4096 x 128 = 16,777,216) and the gathered key (2 x 4096 x 576
    # = 4,718,592)
    part, whole = dsa.block_bytes(_arch(), _shard("none"))
    assert part + whole == 3_650_093_056 + 67_108_864 + 16_777_216 + 4_718_592


def test_tilelang_keeps_the_query_and_the_indices() -> None:
    # 16 heads a rank: q_nope 2 x 16 x 4096 x 128, W_uv's input 2 x 16 x 4096 x 512, the query
    # 2 x 16 x 4096 x 576 and its head mask 16 x 4096; whole: the key 2 x 4096 x 576 and the int32
    # indices 4 x 4096 x 2048
    part, whole = dsa.block_bytes(_arch(), _shard("tilelang"))
    assert part == 2 * 16 * 4096 * (128 + 512 + 576) + 16 * 4096
    assert whole == 2 * 4096 * 576 + 4 * 4096 * 2048
    # mla_up_proj frees q_nope, the query and the key after the attention: the views keep nothing
    rebuilt = _shard("tilelang", recompute="core_attn", modules=frozenset({"mla_up_proj"}))
    part, whole = dsa.block_bytes(_arch(), rebuilt)
    assert (part, whole) == (2 * 16 * 4096 * 512 + 16 * 4096, 4 * 4096 * 2048)


def test_what_the_dense_path_holds_while_it_runs() -> None:
    # the PyTorch indexer's fp32 einsum over 64 heads and its head sum, 4 x 65 x 4096^2
    # (4,362,076,160), is more than the attention's three fp32 score copies and two index masks
    # (12 x 16 x 4096^2 + 8 x 4096^2 = 3,355,443,200)
    assert dsa.working_bytes(_arch(), _shard("none")) == 4 * 65 * 4096**2
    # TileLang scores 8,192 rows at a time: 4 x 4096 x 4096 of logits for one 4k sequence
    assert dsa.working_bytes(_arch(), _shard("tilelang")) == max(
        4 * 4096 * 4096, 2 * 4096 * 16 * 576 + 4 * 4096 * 576
    )


def test_the_gate_refuses_the_dense_path_and_takes_the_sparse_kernels() -> None:
    # one DSv3.2 layer's worth at 4k on 8 H100 at tp 8: backend none keeps 3.65 GB a layer and
    # holds 4.4 GB more while one runs; with 8 layers on the GPU it cannot fit where TileLang's
    # kernels do (the CI gate must never say "fits" for the dense path's run)
    def peak(backend: str) -> float:
        doc = {
            "model": _model(num_layers=8, moe_layer_freq=[0] * 8, mtp_num_layers=0),
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
            "training": {"seq_length": 4096, "global_batch_size": 8, "dsa_kernel_backend": backend},
            "parallel": {"tp": 8, "sequence_parallel": True, "micro_batch_size": 1},
        }
        plan = parse_plan(doc, ZOO)
        return memory.estimate(plan.job, plan.layout).peak

    none, tilelang = peak("none"), peak("tilelang")
    assert none - tilelang > 8 * 3.0e9
    assert tilelang < none


def test_sparse_attention_pays_at_long_context_and_not_at_4k() -> None:
    # the absorbed attention's FLOPs per head and key, 2 (576 + 512) = 2176, against dense MLA's
    # causal 2 (192 + 128) = 640 over half the keys: at 4k, TileLang's 2,048 slots cost
    # 2176 x 2048 / (640 x 2048) = 3.4x dense flash MLA's work; at 128k, 2176 x 2048 /
    # (640 x 65,536) = 0.11x. The time follows the work on either side of the break-even
    # (~14k tokens) whatever the kernels' rates
    def ratio(seq: int) -> float:
        job = _job("tilelang", seq=seq)
        gpu = gpu_of(job)
        t = float(seq)
        sparse = sum(dsa_time.attention_seconds(job, gpu, t, seq, 8, 1.0))
        from planner.model import attention_time

        core = attention_time.core_attention(job, gpu, t, seq, 8, 1.0)
        return sparse / (core.fwd + core.bwd)

    assert ratio(4096) > 2.0
    assert ratio(131072) < 0.3


def test_the_indexer_runs_forward_only_without_its_loss() -> None:
    job = _job("tilelang")
    gpu = gpu_of(job)
    fwd, bwd = dsa_time.indexer_time(job, gpu, 4096.0, 4096, 8)
    assert fwd > 0 and bwd == 0.0
    on = _job("tilelang", dsa_indexer_loss_coeff=0.01)
    assert dsa_time.indexer_time(on, gpu, 4096.0, 4096, 8)[1] > 0


def test_explain_says_which_kernels_run_and_why_not() -> None:
    # TileLang asked at a top-k of 2,000 (not a multiple of 64): Megatron runs the PyTorch path
    # without a word; explain says so (dsa_kernels.py / ops/tilelang_dsa.py's conditions)
    from planner.cli.explain_dsa import dsa_text

    doc = {
        "model": _model(dsa_indexer_topk=2000),
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
        "training": {"seq_length": 4096, "global_batch_size": 8, "dsa_kernel_backend": "tilelang"},
        "parallel": {"tp": 8, "sequence_parallel": True, "micro_batch_size": 1},
    }
    plan = parse_plan(doc, ZOO)
    text = dsa_text(plan.job, plan.layout)
    assert text is not None
    assert "the PyTorch path" in text and "multiple of 64 (got 2000)" in text
    assert "13 bytes per score" in text
    sparse = parse_plan({**doc, "model": _model()}, ZOO)
    text = dsa_text(sparse.job, sparse.layout)
    assert text is not None and "TileLang's sparse MLA:" in text and "falls back" not in text


def test_context_parallelism_gathers_the_latent_key_and_the_indexer_key() -> None:
    # all_gather gathers one 576-wide latent key and the indexer's 128-wide key per token, bf16,
    # whole on every TP rank: (576 + 128) x 2 = 1,408 bytes a token, not the dense MLA's K
    # (128 + 64 wide) and V (128) of each of its 128 / 8 = 16 heads: 16 x 320 x 2 = 10,240
    from planner.model import cp_time

    assert cp_time.kv_bytes(_arch(), 1000, 8) == 1000 * 1408
    dense = _arch(dsa_indexer_n_heads=None, dsa_indexer_head_dim=None, dsa_indexer_topk=None)
    assert cp_time.kv_bytes(dense, 1000, 8) == 1000 * 16 * (192 + 128) * 2


def test_check_advises_the_sparse_kernels() -> None:
    # the dense path's plan that does not fit: check's single changes name the sparse kernels
    # (a job field, the layout kept), which save the scores and fit; one entry for the setting
    # (QA: both were listed), of the two that each fit (memory.estimate of the job with them)
    from planner.search import advice

    doc = {
        "model": _model(num_layers=16, moe_layer_freq=[0] * 16, mtp_num_layers=0),
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
        "training": {"seq_length": 4096, "global_batch_size": 8, "dsa_kernel_backend": "none"},
        "parallel": {"tp": 8, "sequence_parallel": True, "micro_batch_size": 1},
    }
    plan = parse_plan(doc, ZOO)
    assert not memory.estimate(plan.job, plan.layout).fits
    changes = advice.memory_changes(plan.job, plan.layout)
    (kernel,) = [c for c in changes if c.field == "training.dsa_kernel_backend"]
    assert kernel.fits and kernel.layout == plan.layout and kernel.after in ("tilelang", "cudnn")
    for name in ("tilelang", "cudnn"):
        with_it = replace(plan.job, dsa_kernel_backend=name)
        assert memory.estimate(with_it, plan.layout).fits


def test_flashmla_head_padding_by_generation() -> None:
    # dsa_cudnn_kernels.py `_flash_mla_head_padding`: Hopper pads fewer than 64 heads that divide
    # 64 up to 64 and takes multiples of 64; Blackwell pads to 64 or 128 (the first they divide)
    # and takes multiples of 128; anything else declines to the PyTorch path
    assert dsa.cudnn_heads(16, blackwell=False) == 64
    assert dsa.cudnn_heads(128, blackwell=False) == 128
    assert dsa.cudnn_heads(48, blackwell=False) is None  # 64 % 48 != 0
    assert dsa.cudnn_heads(16, blackwell=True) == 64
    assert dsa.cudnn_heads(128, blackwell=True) == 128
    assert dsa.cudnn_heads(96, blackwell=True) is None
    assert dsa.cudnn_heads(192, blackwell=False) == 192 and dsa.cudnn_heads(192, True) is None
    # so DeepSeek-V3.2's 128 heads at tp 8 run 64 on either part; at tp 1 on Blackwell, 128
    job = _job("cudnn", gpu="b200-sxm-180gb")
    assert dsa.local_heads(job.arch, 8, "cudnn", blackwell=True) == 64
    odd = Job(**{**job.__dict__, "arch": job.arch.model_copy(update={"num_attention_heads": 96})})
    assert dsa.backend(odd, 1) == "none" and "96 heads" in (dsa.fallback(odd, 1) or "")
