"""planner.search.rules.context.flash2_head_dims: FlashAttention-2 does not run multi-latent
attention, whose query / key and value heads differ in width.

Oracles:
- TransformerEngine 002a3e57 transformer_engine/pytorch/attention/dot_product_attention/utils.py,
  get_attention_backend, "Filter: Head dimension": `if head_dim_qk != head_dim_v:` ...
  "Disabling FlashAttention 2 as it does not support MLA."
- Megatron-LM d98e8a64 megatron/core/models/common/language_module/language_module.py:133-136
  (--attention-backend flash: NVTE_FLASH_ATTN=1, NVTE_FUSED_ATTN=0, NVTE_UNFUSED_ATTN=0) and
  :154-159 (--flash-attention-version 2: NVTE_FLASH_ATTN_V3=0, V4=0): no other backend is left.
- Megatron-LM d98e8a64 multi_latent_attention.py:214-215: k_channels = qk_head_dim +
  qk_pos_emb_head_dim, v_channels = v_head_dim. Hand arithmetic on model_zoo/deepseek-v3.toml and
  deepseek-v2-lite.toml (qk_head_dim 128, qk_pos_emb_head_dim 64, v_head_dim 128):
  128 + 64 = 192 != 128. Llama 3.1 8B: head_dim 4096 / 32 = 128 for Q, K and V alike.
- pytorch 001f694a aten/src/ATen/native/transformers/cuda/sdp_utils.cpp
  `check_head_dim_size_flash` ("Flash attention requires q,k,v to have the same last
  dimension"): torchtitan's SDPA flash backend refuses them too.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run
from paths import REPO

from planner.emit.bridge_notes import attention_backend
from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.search import rules
from planner.search.rules import check_plan, job_violations
from planner.search.rules.context import flash2_head_dims
from tests.search.test_rules import make_job

LAY = Layout(dp=8)

DSV3_PLAN = REPO / "examples" / "deepseek-v3-h800.toml"

MLA_LINE = (
    "--num-layers 4 --hidden-size 2048 --ffn-hidden-size 10944 --num-attention-heads 16 "
    "--multi-latent-attention --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 "
    "--v-head-dim 128 --kv-channels 128 --swiglu --normalization RMSNorm "
    "--position-embedding-type rope --untie-embeddings-and-output-weights "
    "--disable-bias-linear --vocab-size 102400 --tokenizer-type NullTokenizer "
    "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 "
    "--global-batch-size 64 --use-distributed-optimizer --bf16 "
)
"""A DeepSeek-V2-Lite-shaped MLA model (query/key 128 + 64 = 192 wide, value 128)."""


def test_flash2_breaks_an_mla_model_naming_field_value_and_source() -> None:
    """DeepSeek-V3 (192 / 128) under flash2: the rule fires on training.attention_kernel, the
    message printing both widths (128 + 64 = 192, 128) and citing TE and Megatron-LM; what
    runs breaks nothing."""
    job = replace(make_job("deepseek-v3", num_gpus=8), attention_kernel="flash2")
    v = flash2_head_dims(job, LAY)
    assert v is not None and v.rule == "mla_flash2"
    assert v.field == "training.attention_kernel"
    assert "'flash2'" in v.message
    assert "query/key head dim 192 = qk_head_dim 128 + qk_pos_emb_head_dim 64" in v.message
    assert "value head dim 128" in v.message
    assert "TransformerEngine 002a3e57" in v.message
    assert "language_module.py:133-136, 154-159" in v.message
    assert 'attention_kernel = "fused"' in v.message
    # what runs: the fused kernel (cuDNN / FA3 take 192 / 128), Megatron's unfused attention,
    # equal widths under flash2 (Llama 3.1 8B: 128 / 128), and a Megatron plan off NVIDIA,
    # where the launch pins no backend (emit/megatron.py)
    assert flash2_head_dims(replace(job, attention_kernel="fused"), LAY) is None
    assert flash2_head_dims(replace(job, flash_attention=False), LAY) is None
    llama = replace(make_job("llama3.1-8b", num_gpus=8), attention_kernel="flash2")
    assert flash2_head_dims(llama, LAY) is None
    amd = replace(
        make_job("deepseek-v3", gpu="mi300x-192gb", num_gpus=8), attention_kernel="flash2"
    )
    assert flash2_head_dims(amd, LAY) is None


def test_torchtitan_flash2_breaks_too() -> None:
    """PyTorch SDPA's flash backend needs equal q, k, v widths (check_head_dim_size_flash)."""
    job = replace(
        make_job("deepseek-v3", num_gpus=8), attention_kernel="flash2", framework="torchtitan"
    )
    v = flash2_head_dims(job, LAY)
    assert v is not None and v.rule == "mla_flash2"
    assert "check_head_dim_size_flash" in v.message


def test_the_rule_is_a_job_rule_every_layout_breaks() -> None:
    """It depends on the job alone: in RULES (check, the search's pruning), in JOB_RULES (suggest
    says why nothing runs) and so in STRUCTURAL_RULES (structures pruned before they expand)."""
    assert flash2_head_dims in rules.RULES
    assert flash2_head_dims in rules.JOB_RULES
    assert flash2_head_dims in rules.STRUCTURAL_RULES
    job = replace(make_job("deepseek-v2-lite", num_gpus=8), attention_kernel="flash2")
    assert [v.rule for v in job_violations(job)] == ["mla_flash2"]


def test_check_refuses_the_plan_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The QA repro: the DeepSeek-V3 plan with attention_kernel "flash2" passed `check` (rc 0,
    "fits: peak 77.1 GiB"); now `check` exits 2 (bad input, as every broken rule) naming the
    field. The example as shipped (fused) still passes the rules."""
    text = DSV3_PLAN.read_text()
    assert "attention_kernel" not in text  # the example takes the fused default
    path = tmp_path / "dsv3_flash2.toml"
    path.write_text(text.replace("[training]\n", '[training]\nattention_kernel = "flash2"\n', 1))
    code, _, err = run(["check", str(path)], capsys)
    assert code == 2, err
    assert "training.attention_kernel" in err and "multi-latent attention" in err
    code, out, err = run(["launch", str(path), "--target", "megatron-args"], capsys)
    assert code == 2 and "--flash-attention-version" not in out
    code, out, err = run(["check", str(DSV3_PLAN)], capsys)
    # the rules pass (a broken one exits 2); the example fits its GPUs but not the host memory
    # planner assumes for H800 nodes (exit 1, the example's verdict)
    assert code == 1 and "does not fit in host memory" in out, err


def test_check_megatron_args_refuses_the_pinned_fa2_line() -> None:
    """`check --megatron-args` reads --attention-backend flash --flash-attention-version 2 as
    flash2 (megatron_training._attention): refused for MLA. --attention-backend flash without a
    version (FA3 runs 192 / 128 on sm90) and fused are accepted."""
    pinned = megatron_args.read(
        MLA_LINE + "--attention-backend flash --flash-attention-version 2",
        "h100-sxm-80gb",
        8,
        "train.sh",
    )
    with pytest.raises(InputError, match=r"train\.sh: training\.attention_kernel: .*flash2"):
        check_plan(parse_plan(pinned.doc, Path("train.sh")))
    for extra in ("--attention-backend flash", "--attention-backend fused", ""):
        reading = megatron_args.read(MLA_LINE + extra, "h100-sxm-80gb", 8, "train.sh")
        check_plan(parse_plan(reading.doc, Path("train.sh")))


def test_suggest_never_plans_flash2_for_mla(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The search keeps the job's attention_kernel: flash2 with an MLA model runs in no layout
    (mla_flash2, a rule on the job alone), so suggest refuses it as check does, exit 2 naming
    the file and the field."""
    job = tmp_path / "job.toml"
    body = (
        '[model]\nname = "deepseek-v2-lite"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        "[training]\nseq_length = 4096\nglobal_batch_size = 64\n"
    )
    job.write_text(body + 'attention_kernel = "flash2"\n')
    code, out, err = run(["suggest", str(job), "--json"], capsys)
    assert code == 2, err
    assert out == "" and f"{job}: training.attention_kernel: " in err, err


def test_the_bridge_target_never_pins_flash_for_mla() -> None:
    """The Megatron-Bridge override's attention_backend: "flash" (FlashAttention-2) for a
    model with equal widths, refused for MLA rather than written."""
    llama = replace(make_job("llama3.1-8b", num_gpus=8), attention_kernel="flash2")
    assert attention_backend(llama) == "flash"
    mla = replace(make_job("deepseek-v3", num_gpus=8), attention_kernel="flash2")
    with pytest.raises(InputError, match=r"training\.attention_kernel"):
        attention_backend(mla)
    assert attention_backend(replace(mla, attention_kernel="fused")) == "auto"
