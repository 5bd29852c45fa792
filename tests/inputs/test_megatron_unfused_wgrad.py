"""Megatron-LM flags the reader used to drop or ignore (a QA pass):
--no-gradient-accumulation-fusion (read, priced, written back),
--dataloader-inter-document-masking (no dataloader mask), --sft with the mask (refused),
--decrease-batch-size-if-needed (the batch rounded down) and
--moe-paged-stash-buffer-size-factor-cpu (noted).

Oracles: Megatron-LM d98e8a64 source lines restated in each test, and hand arithmetic.
"""

from __future__ import annotations

import pytest
from megatron_scripts import SMALL, read

from planner.emit import bridge, megatron
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan
from planner.model import cost, wgrad_accumulation
from planner.model.layer_time import gpu_of

UNFUSED = "--no-gradient-accumulation-fusion"
BASE = SMALL + (
    "--tensor-model-parallel-size 2 --use-distributed-optimizer --global-batch-size 32 "
    "--untie-embeddings-and-output-weights --vocab-size 32000 --tokenizer-type NullTokenizer "
)
"""SMALL at tp 2 with the distributed optimizer: on 8 GPUs dp 4, 8 micro-batches."""


def test_the_flag_is_read_into_the_plan() -> None:
    # arguments.py:2944-2948: a store_false of gradient_accumulation_fusion (default True)
    assert read(BASE + UNFUSED).doc["training"]["gradient_accumulation_fusion"] is False
    assert "gradient_accumulation_fusion" not in read(BASE).doc["training"]
    # torch FSDP2 asserts the flag (arguments.py:1040) and keeps no main gradients
    # (torch_fully_sharded_data_parallel.py): nothing to un-fuse
    fsdp2 = BASE.replace("--use-distributed-optimizer ", "") + (
        "--use-torch-fsdp2 --ckpt-format torch_dist " + UNFUSED
    )
    assert "gradient_accumulation_fusion" not in read(fsdp2).doc["training"]


def test_the_hooks_add_is_timed_at_hbm_speed() -> None:
    """DDP's hook adds each TE linear's bf16 .grad into its fp32 main gradient
    (distributed_data_parallel.py:575-578): 2 + 4 read + 4 written = 10 bytes a parameter and
    micro-batch, at the achieved HBM bandwidth; with pp 1 the one rank's step grows by
    m x that."""
    plan = parse_plan(read(BASE + UNFUSED).doc)
    fused = parse_plan(read(BASE).doc)
    lay = plan.require_layout()
    assert lay.pp == 1 and lay.zero_stage == 1
    job, gpu = plan.job, gpu_of(plan.job)
    assert wgrad_accumulation.bytes_per_param(job, lay) == 2 + 4 + 4
    chunks = lay.chunk_layers(job.arch.num_layers)[0]
    n = wgrad_accumulation.unfused_params(job, lay, 0, chunks)
    per_mb = wgrad_accumulation.seconds(job, lay, 0, chunks, gpu)
    assert per_mb == pytest.approx(n * 10 / gpu.hbm)
    assert wgrad_accumulation.seconds(fused.job, lay, 0, chunks, gpu) == 0.0
    m = lay.num_microbatches(job.global_batch_size)
    slower = cost.estimate(plan.job, lay).step_time_s - cost.estimate(fused.job, lay).step_time_s
    assert slower == pytest.approx(m * per_mb, rel=0.02)


def test_the_unfused_parameters_leave_out_the_embedding() -> None:
    """The rank's parameters but the word (and position) embedding, whose lookup never fuses.
    BASE's model, by hand: h 1024, F 4096 (not gated), a 16 heads, MHA, LayerNorm with biases,
    untied vocabulary 32000 padded to a multiple of 128 x tp."""
    plan = parse_plan(read(BASE + UNFUSED).doc)
    job, lay = plan.job, plan.require_layout()
    arch = job.arch
    h, f, layers = arch.hidden_size, arch.ffn_hidden_size, arch.num_layers
    vocab = arch.padded_vocab(lay.tp)
    attn = h * 3 * h + 3 * h + h * h + h  # qkv weight + bias, proj weight + bias
    mlp = h * f + f + f * h + h
    norms = 2 * 2 * h  # two LayerNorms (weight + bias) a layer
    decoder = layers * ((attn + mlp) / lay.tp + norms)  # biases of the row-parallel proj/fc2
    chunks = lay.chunk_layers(arch.num_layers)[0]
    n = wgrad_accumulation.unfused_params(job, lay, 0, chunks)
    output = vocab * h / lay.tp + 2 * h  # untied output layer and the final LayerNorm
    assert n == pytest.approx(decoder + output, rel=2e-3)


def test_megatron_fsdp_copies_instead() -> None:
    # megatron_fsdp.py:650-660: sharded gradients copy .grad into the main gradient: 2 + 4
    text = BASE + "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params "
    text += "--ckpt-format fsdp_dtensor "
    plan = parse_plan(read(text + "--megatron-fsdp-main-grads-dtype fp32 " + UNFUSED).doc)
    assert plan.require_layout().zero_stage == 3
    assert wgrad_accumulation.bytes_per_param(plan.job, plan.require_layout()) == 2 + 4


def test_the_launches_write_it_back() -> None:
    plan = parse_plan(read(BASE + UNFUSED).doc)
    args = [w for arg in megatron.training_args(plan) for w in arg]
    assert UNFUSED in args
    fused = parse_plan(read(BASE).doc)
    assert UNFUSED not in [w for arg in megatron.training_args(fused) for w in arg]
    # Megatron-Bridge: GPTModelProvider.gradient_accumulation_fusion (gpt_provider.py:206)
    assert bridge.sections(plan)["model"]["gradient_accumulation_fusion"] is False
    assert bridge.sections(fused)["model"]["gradient_accumulation_fusion"] is True


def test_inter_document_masking_builds_no_mask() -> None:
    # arguments.py:1340-1344: create_attention_mask_in_dataloader set False under it
    assert read(BASE).doc["training"].get("dataloader_attention_mask") is True
    text = BASE + "--dataloader-inter-document-masking"
    assert "dataloader_attention_mask" not in read(text).doc["training"]


def test_sft_with_the_mask_is_refused() -> None:
    # sft_dataset.py:174 asserts `not self.config.create_attention_mask` on every sample
    with pytest.raises(InputError, match="--sft: needs the dataloader's attention mask off"):
        read(BASE + "--sft")
    read(BASE + "--sft --no-create-attention-mask-in-dataloader")


def test_decrease_batch_size_rounds_down() -> None:
    """num_microbatches_calculator.py:368-373: (gbs // (mbs x dp)) x mbs x dp. BASE on 8 GPUs
    at tp 2: dp 4, mbs 1 -> 30 // 4 x 4 = 28. arguments.py:708-721 still asserts the eval batch
    (default the global one) a multiple of mbs x dp."""
    text = BASE.replace("--global-batch-size 32", "--global-batch-size 30")
    assert "--global-batch-size 30" in text
    assert read(text).doc["training"]["global_batch_size"] == 30  # the rules refuse it
    with pytest.raises(InputError, match="evaluation batch"):
        read(text + " --decrease-batch-size-if-needed")
    r = read(text + " --decrease-batch-size-if-needed --eval-global-batch-size 32")
    assert r.doc["training"]["global_batch_size"] == 28
    assert any("read at 28" in n for n in r.notes)


def test_paged_stash_host_buffer_is_noted() -> None:
    # transformer_config.py:1376: 0 (the default) allocates no host buffer
    flag = "--moe-paged-stash-buffer-size-factor-cpu"
    assert not [m for m in read(BASE + flag + " 0").not_modelled if m.startswith(flag)]
    assert [m for m in read(BASE + flag + " 1.5").not_modelled if m.startswith(flag)]
