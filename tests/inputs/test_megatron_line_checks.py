"""What Megatron-LM (d98e8a64) does with a command line that planner read otherwise (a QA pass
against Megatron's source): the lines it refuses at start-up exit 2 naming the flag, the
defaults it fills in are planner's too, and what planner does not model is refused rather than
judged with the memory under-counted.

Oracles: megatron/training/arguments.py (validate_args and the argparse defaults),
megatron/training/argument_utils.py, megatron/core/transformer/transformer_config.py,
megatron/core/optimizer/optimizer_config.py and pretrain_gpt.py at d98e8a64, cited per case."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planner.emit.megatron import parallel_args, training_args
from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.megatron_line import no_flags
from planner.inputs.plan import load_plan, parse_plan
from planner.model import memory

SMALL = (
    "--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --bf16 --vocab-size 32000 "
    "--tokenizer-type NullTokenizer "
)


def read(extra: str, gpus: int = 8) -> megatron_args.Reading:
    return megatron_args.read(SMALL + extra, "h100-sxm-80gb", gpus, "train.sh")


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        # validate_args: deprecated arguments asserted unset, --checkpoint-activations exits
        ("--batch-size 4", "--batch-size"),
        ("--warmup 10", "--warmup"),
        ("--model-parallel-size 2", "--model-parallel-size"),
        ("--checkpoint-activations", "--checkpoint-activations"),
        # RuntimeError: "--no-position-embedding is deprecated" unless rope
        ("--no-position-embedding", "--no-position-embedding"),
        ("--max-position-embeddings 2048", "--max-position-embeddings"),  # below seq 4096
        ("--mtp-num-layers 1", "--mtp-num-layers"),  # learned positions: MTP asserts rope/none
        ("--swiglu --squared-relu", "--squared-relu"),  # argument_utils.py asserts
        ("--fp8-format hybrid --fp4-format nvfp4", "--fp4-format"),
        ("--fp4-param-gather", "--fp4-param-gather"),
        ("--fp8-format e5m2", "--fp8-format"),  # TransformerConfig: Literal['e4m3', 'hybrid']
        ("--main-grads-dtype bf16", "--main-grads-dtype"),  # OptimizerConfig asserts fp32
        ("--overlap-grad-reduce --overlap-param-gather", "--overlap-param-gather"),  # no dist opt
        # validate_args: fp8_param_gather needs a sharded optimizer unless grads are disabled
        ("--fp8-format hybrid --fp8-param-gather", "--fp8-param-gather"),
        ("--use-megatron-fsdp", "--ckpt-format"),  # asserts ckpt_format == "fsdp_dtensor"
        ("--use-torch-fsdp2 --untie-embeddings-and-output-weights", "--no-gradient-accumulation"),
        ("--context-parallel-size 2 --cp-comm-type a2a+p2p", "--cp-comm-type"),
        (
            "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 "
            "--no-overlap-p2p-communication",
            "--no-overlap-p2p-communication",
        ),
        (
            "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 "
            "--num-virtual-stages-per-pipeline-rank 2",
            "--num-virtual-stages-per-pipeline-rank",
        ),
        # selective takes no method; full needs a method and a layer count (TransformerConfig)
        ("--recompute-granularity selective --recompute-method uniform", "--recompute-method"),
        ("--recompute-granularity full --recompute-num-layers 1", "--recompute-method"),
        ("--recompute-granularity full --recompute-method block", "--recompute-num-layers"),
        # the first stage's layers a multiple of the virtual size (TransformerConfig raises)
        (
            "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
            "--decoder-first-pipeline-num-layers 3",
            "--decoder-first-pipeline-num-layers",
        ),
    ],
)
def test_what_megatron_refuses_at_start_up_exits_2(extra: str, flag: str) -> None:
    """planner read each of these (exit 0 or 1) where Megatron-LM does not start."""
    with pytest.raises(InputError, match=re.escape(f"train.sh: {flag}")):
        read(extra)


@pytest.mark.parametrize(
    "extra",
    [
        "--enable-mhc-connections",
        "--fp32-residual-connection",
        "--heterogeneous-layers-config-path h.json",
        "--tensor-model-parallel-size 2 --tensor-parallel-num-weight-shards 4",
    ],
)
def test_memory_planner_does_not_model_is_refused(extra: str) -> None:
    """Four residual streams (mHC), an fp32 residual stream, per-layer shapes from a file, and
    weight shards beyond TP (which also shrink the data-parallel size: arguments.py counts
    shards / tp into the model-parallel size) were read as if absent: memory under-counted, or
    the wrong layout."""
    with pytest.raises(InputError, match="planner does not model"):
        read(extra)
    # the shards at the TP size are plain TP (resolve_tensor_parallel_weight_shards' default)
    plain = read("--tensor-model-parallel-size 2 --tensor-parallel-num-weight-shards 2")
    assert plain.doc["parallel"]["tp"] == 2


def test_recompute_activations_makes_the_recompute_selective() -> None:
    """arguments.py: `if args.recompute_activations: args.recompute_granularity = 'selective'`,
    whatever --recompute-granularity says; planner read full recompute, which fits where the
    selective run does not."""
    reading = read("--recompute-activations --recompute-granularity full")
    assert reading.doc["parallel"]["recompute"] == "selective"


def test_megatrons_defaults_are_filled_in() -> None:
    """--group-query-attention alone is one query group (TransformerConfig's argparse default
    num_query_groups = 1); --multi-latent-attention alone takes the MLA shape's argparse
    defaults (kv_lora_rank 32, qk_head_dim 128, qk_pos_emb_head_dim 64, v_head_dim 128); and
    --num-experts 0 is a dense model (validate_args sets it None). planner read all heads, and
    refused the other two."""
    gqa = parse_plan(read("--group-query-attention").doc).job.arch
    assert gqa.num_query_groups == 1
    mla = read("--multi-latent-attention --position-embedding-type rope").doc["model"]
    assert (mla["kv_lora_rank"], mla["qk_head_dim"], mla["qk_pos_emb_head_dim"]) == (32, 128, 64)
    assert mla["v_head_dim"] == 128 and "q_lora_rank" not in mla
    parse_plan(read("--multi-latent-attention --position-embedding-type rope").doc)
    dense = parse_plan(read("--num-experts 0").doc).job.arch
    assert not dense.is_moe


def test_first_and_last_stages_alone_at_pp_2() -> None:
    """pp 2 with both --decoder-first- and --decoder-last-pipeline-num-layers: no middle ranks
    and no middle layers, which TransformerConfig accepts (both zero); planner refused it."""
    extra = (
        "--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 3 "
        "--decoder-last-pipeline-num-layers 5"
    )
    assert read(extra).doc["parallel"]["pipeline_layers"] == (3, 5)
    with pytest.raises(InputError, match="middle layers"):  # 3 + 4 of 8: one left, no rank
        read(extra.replace("5", "4"))


def test_the_dataloader_mask_is_counted_on_the_first_and_last_stage() -> None:
    """pretrain_gpt.py get_batch loads the batch on the first and the last pipeline stage only,
    and the [micro-batch, 1, seq, seq] bool mask with it unless
    --no-create-attention-mask-in-dataloader. By hand: micro-batch 2 x 4096^2 = 32 MiB on
    stages 0 and 3 of 4, none on 1 and 2; and planner launch writes the flag that turns it off."""
    extra = "--pipeline-model-parallel-size 4 --micro-batch-size 2 --global-batch-size 16"
    with_mask = parse_plan(read(extra).doc)
    without = parse_plan(read(extra + " --no-create-attention-mask-in-dataloader").doc)
    assert with_mask.job.dataloader_attention_mask and not without.job.dataloader_attention_mask
    lay = with_mask.require_layout()
    a = memory.estimate(with_mask.job, lay).stages
    b = memory.estimate(without.job, lay).stages
    mask = 2 * 4096**2
    assert [x.other - y.other for x, y in zip(a, b, strict=True)] == [mask, 0, 0, mask]
    words = [w for arg in training_args(without) + parallel_args(without) for w in arg]
    assert "--no-create-attention-mask-in-dataloader" in words


def test_a_plan_file_launches_without_the_mask(tmp_path: Path) -> None:
    """A plan (default: no mask) launches with --no-create-attention-mask-in-dataloader, and
    its check matches the launched run's memory; one that asks for the mask is written without
    the flag (Megatron's default then builds it)."""
    text = (
        '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        "[training]\nseq_length = 8192\nglobal_batch_size = 64\n{extra}"
        "[parallel]\ntp = 8\n"
    )
    for extra, flagged in (("", True), ("dataloader_attention_mask = true\n", False)):
        path = tmp_path / "p.toml"
        path.write_text(text.format(extra=extra))
        plan = load_plan(path)
        words = [w for arg in training_args(plan) for w in arg]
        assert ("--no-create-attention-mask-in-dataloader" in words) is flagged


def test_a_script_name_is_no_nemo_override() -> None:
    """A line whose flags come from "$@" (set --, which planner does not expand) has only its
    launcher's words: pretrain_gpt.py was taken for a NeMo key=value override."""
    assert "NeMo" not in no_flags(["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py"])
    assert "NeMo" in no_flags(["nemo", "llm", "pretrain", "trainer.devices=8"])
    assert "NeMo" in no_flags(["model.tensor_model_parallel_size=2"])


def test_fp8_param_gather_alone_runs_only_in_inference() -> None:
    """validate_args asserts --fp8-param-gather with the distributed optimizer, torch FSDP2,
    Megatron-FSDP, `or not torch.is_grad_enabled()` (arguments.py:1095-1097): a generation entry
    point (which runs under no_grad) gets past it, but runs FP8 weights as the parameters at
    ZeRO 0 (argument_utils.py:312, transformer_block.py:354-355), which planner does not model,
    so it exits 2 naming the flag as --fp4-param-gather does
    (test_megatron_dist_optimizer_reading.py); a training line with the distributed optimizer
    is read."""
    extra = "--fp8-format hybrid --fp8-param-gather"
    words = "examples/inference/advanced/gpt_static_inference.py " + SMALL + extra
    with pytest.raises(InputError, match=r"infer\.sh: --fp8-param-gather: .*only inference"):
        megatron_args.read(words, "h100-sxm-80gb", 8, "infer.sh")
    assert read(extra + " --use-distributed-optimizer").doc["training"]["fp8_param_gather"]


def test_a_line_without_max_position_embeddings_is_told_megatron_needs_it() -> None:
    """validate_args requires --max-position-embeddings (`_check_arg_is_not_none`), read after
    --use-checkpoint-args loads the checkpoint's arguments; planner reads it as --seq-length and
    says so, unless the checkpoint supplies it."""
    line = SMALL.replace("--max-position-embeddings 4096 ", "")
    note = "--max-position-embeddings: not given"
    reading = megatron_args.read(line, "h100-sxm-80gb", 8, "train.sh")
    assert any(n.startswith(note) for n in reading.notes)
    assert reading.doc["model"]["max_position_embeddings"] == 4096
    assert not any(n.startswith(note) for n in read("").notes)
    restored = megatron_args.read(line + "--use-checkpoint-args", "h100-sxm-80gb", 8, "t.sh")
    assert not any(n.startswith(note) for n in restored.notes)
