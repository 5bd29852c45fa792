"""Which attention kernel a torchtitan plan runs, by era and model, and the FlexAttention block
mask it keeps (planner.model.titan_attention).

Oracles: pytorch/torchtitan e347b1e5 models/llama3/model/args.py:45, models/qwen3/model/args.py
:39 (attn_type "sdpa"), models/deepseek_v3/__init__.py:154-155 (671B: flex, block_causal),
models/gpt_oss/model/args.py:66-67 (flex, causal), models/deepseek_v3/model/model.py:456-477
(the block_causal mask's B = the batch); b5bcd76c models/llama3/__init__.py:371 (attn_backend
"flex"), models/gpt_oss/__init__.py:391 ("varlen"), models common decoder.py:301-320 (one mask
of B = 1 over the packed tokens); planner.emit.torchtitan (the TOML target refuses a
deterministic plan without deterministic_fill, and loss_chunks > 1); pytorch's BlockMask (8
int32 tensors, rows = cols = ceil(L / 128)). Hand arithmetic in the comments."""

from __future__ import annotations

from dataclasses import replace

from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan import TorchtitanSection
from planner.model import known_gaps, memory, titan_accumulation, titan_attention


def _titan(model: str, seq: int = 4096, **titan: object) -> Job:
    return job(
        model,
        "h100-sxm-80gb",
        8,
        seq,
        8,
        framework="torchtitan",
        torchtitan=TorchtitanSection.model_validate(titan),
    )


ONE = Layout(dp=8, zero_stage=3)


def test_the_toml_era_runs_sdpa_for_llama_and_qwen_flex_for_deepseek_and_gpt_oss() -> None:
    assert titan_attention.backend(_titan("llama3.1-8b"), ONE) == "sdpa"  # args.py:45
    assert titan_attention.backend(_titan("qwen3-30b-a3b"), ONE) == "sdpa"  # qwen3 args.py:39
    assert titan_attention.backend(_titan("deepseek-v3"), ONE) == "flex"  # __init__.py:154
    assert titan_attention.backend(_titan("gpt-oss-20b"), ONE) == "flex"  # args.py:67
    # Megatron plans: not torchtitan's question
    assert (
        titan_attention.backend(replace(_titan("llama3.1-8b"), framework="megatron"), ONE) is None
    )


def test_a_plan_only_the_module_writes_runs_its_defaults() -> None:
    # a chunked loss: only b5bcd76c runs it; model_registry's default there is "flex"
    # (llama3/__init__.py:371), gpt-oss's "varlen" (gpt_oss/__init__.py:391), but "flex"
    # under CP (the module target writes attn_backend='flex': varlen runs no CP)
    assert titan_attention.backend(_titan("llama3.1-8b", loss_chunks=8), ONE) == "flex"
    assert titan_attention.backend(_titan("gpt-oss-20b", loss_chunks=8), ONE) == "varlen"
    cp2 = Layout(dp=4, cp=2, zero_stage=3)
    assert titan_attention.backend(_titan("gpt-oss-20b", loss_chunks=8), cp2) == "flex"
    # deterministic without the fill: the TOML target refuses it, the module's mode
    det = replace(_titan("llama3.1-8b"), deterministic=True)
    assert titan_attention.backend(det, ONE) == "flex"
    det_fill = replace(_titan("llama3.1-8b", deterministic_fill=True), deterministic=True)
    assert titan_attention.backend(det_fill, ONE) == "sdpa"


def test_the_block_mask_by_hand() -> None:
    # DeepSeek-V3 at e347b1e5, seq 4096, micro-batch 1, no PP: B = 1 (the batch), n = 4096 / 128
    # = 32 tiles; 8 int32 tensors, 4 of n^2 and 4 of n: 4 x 4 x (1,024 + 32) = 16,896 bytes
    ds = _titan("deepseek-v3")
    assert titan_attention.block_mask_bytes(ds, ONE) == 16_896
    # micro-batch 2 under PP 2, one micro-batch a schedule: the schedule's batch is 2 samples,
    # one per-document mask each: 2 x 16,896 = 33,792
    pp = Layout(pp=2, dp=4, micro_batch_size=2, zero_stage=3)
    assert pp.num_microbatches(8) == 1  # global 8 over dp 4 x mbs 2: one micro-batch a rank
    assert titan_attention.block_mask_bytes(ds, pp) == 2 * 16_896
    # Llama 3 8B at b5bcd76c (loss_chunks 8), micro-batch 2 of 8192: one mask, B = 1, over the
    # packed 16,384 tokens: n = 128, 16 x (16,384 + 128) = 264,192
    ll = _titan("llama3.1-8b", seq=8192, loss_chunks=8)
    two = Layout(dp=4, micro_batch_size=2, zero_stage=3)
    assert titan_attention.block_mask_bytes(ll, two) == 264_192
    # SDPA keeps none
    assert titan_attention.block_mask_bytes(_titan("llama3.1-8b"), ONE) == 0.0


def test_the_mask_is_one_accumulation_steps_on_the_raw_job_as_on_its_sub_job() -> None:
    # DeepSeek-V3 at e347b1e5, seq 4096, global batch 8, PP 2 x DP 4, micro-batch 1, k = 2
    # gradient accumulation steps: train.py:561-584 runs k forward-backwards one after another,
    # each building its masks (train.py:463) over its own batch of one schedule: 8 / (4 x 1) = 2
    # micro-batches a step, 2 / k = 1 a schedule, B = 1 sample: 16,896 bytes (n = 32, as above),
    # not the step's 2 samples' 33,792
    ds = _titan("deepseek-v3", gradient_accumulation_steps=2)
    lay = Layout(pp=2, dp=4, zero_stage=3)
    assert lay.num_microbatches(8) == 2  # the step's, both schedules'
    sub = titan_accumulation.sub_job(ds)
    assert sub is not ds and sub.global_batch_size == 4  # one schedule's job
    assert titan_attention.block_mask_bytes(ds, lay) == 16_896
    assert titan_attention.block_mask_bytes(ds, lay) == titan_attention.block_mask_bytes(sub, lay)
    # b5bcd76c (loss_chunks 8, the module's era): one mask of B = 1 over one schedule's packed
    # tokens, 1 x 4096: n = 32, 16,896 bytes on the raw job and the sub-job alike
    mod = _titan("deepseek-v3", gradient_accumulation_steps=2, loss_chunks=8)
    assert titan_attention.block_mask_bytes(mod, lay) == 16_896
    modsub = titan_accumulation.sub_job(mod)
    assert titan_attention.block_mask_bytes(modsub, lay) == 16_896


def test_the_mask_is_in_the_ranks_memory_and_flex_is_flagged_optimistic() -> None:
    ds = _titan("deepseek-v2-lite", seq=131_072 // 8)
    lay = Layout(dp=8, zero_stage=3)
    # n = 16,384 / 128 = 128: 16 x (16,384 + 128) = 264,192 bytes, on the rank outside the
    # activations (memory's `other`), unscaled
    want = titan_attention.block_mask_bytes(ds, lay)
    assert want == 264_192
    with_mask = memory.estimate(ds, lay).worst.other
    megatron = replace(ds, framework="megatron", torchtitan=None)
    assert titan_attention.block_mask_bytes(megatron, lay) == 0.0
    assert with_mask > 0
    assert known_gaps.in_flex_attention(ds, lay)
    assert known_gaps.optimistic(ds, lay)
    assert not known_gaps.in_flex_attention(_titan("llama3.1-8b"), ONE)
