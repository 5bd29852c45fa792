"""A Megatron-LM log's printed arguments as the command line `megatron_args` reads.

Megatron prints every argument after `validate_args` (Megatron-LM d98e8a64
`megatron/training/arguments.py`), by its attribute name and Python value, defaults included.
This module turns the arguments the reader uses (`megatron_flags.READ`) back into flags:
- the attribute of a flag is its name with dashes as underscores, except where the parser
  says otherwise (`DEST`: `--fp8-format` stores `fp8`, `--disable-bias-linear` stores
  `add_bias_linear = False`, from the `argparse_meta` of `TransformerConfig` and the
  `dest=` of `arguments.py`);
- `None` is an argument not given; `True` is a switch given; `False` is a switch not given,
  except for the switches that store False (`STORE_FALSE`), given when the value is False;
- lists print as Python lists and become one word per item, except the layer patterns
  (`ONE_WORD_LISTS`: `--moe-layer-freq`, `--window-attn-skip-freq`, `--linear-attention-freq`,
  whose `moe_freq_type` / `la_freq_type` evaluate a pattern such as `([1]*3+[0])*2` to the list
  `_print_args` prints, arguments.py :327-375), which become one expression; enums in a list
  print as their repr (`cuda_graph_modules`, normalized to `CudaGraphModule` members,
  arguments.py :263-294: `[<CudaGraphModule.attn: 1>]`) and become their names;
  `torch.float32`-style dtypes (validate_args maps `--main-grads-dtype fp32` to
  `torch.float32`) and `AttnBackend.flash`-style enums become the words the parser takes;
- what `validate_args` derives is not a flag given: `encoder_num_layers` (set to
  `num_layers` for GPT) is dropped, and so is `overlap_p2p_comm False` without interleaving
  (validate_args clears it, arguments.py :1010-1012), and so are the MoE arguments of a model
  without experts and the DSA arguments of a model without DeepSeek sparse attention (their
  defaults print; Megatron does not use them);
- a tokenizer whose size is the model's own (HuggingFace, SentencePiece) leaves
  `padded_vocab_size` None when the block prints: the tokenizer, built after it, prints
  ` > padded vocab (size: N) with D dummy tokens (new size: P)`
  (megatron/core/tokenizers/utils/build_tokenizer.py :141-145), and N is the tokenizer's size
  read (`LogRun.vocab`), unless `--vocab-size` is given to planner.
"""

from __future__ import annotations

import ast
import re
import shlex

from planner.inputs import megatron_log
from planner.inputs.errors import InputError, abbreviated
from planner.inputs.megatron_args import Reading, read
from planner.inputs.megatron_flags import READ
from planner.inputs.megatron_log import LogRun

DEST = {
    "--disable-bias-linear": "add_bias_linear",
    "--fp8-format": "fp8",
    "--no-bias-swiglu-fusion": "bias_swiglu_fusion",
    "--microbatch-group-size-per-virtual-pipeline-stage": "microbatch_group_size_per_vp_stage",
    "--no-dsa-indexer-scoring-relu": "dsa_indexer_scoring_relu",
    "--no-rope-fusion": "apply_rope_fusion",
    "--no-create-attention-mask-in-dataloader": "create_attention_mask_in_dataloader",
    "--no-check-for-nan-in-loss-and-grad": "check_for_nan_in_loss_and_grad",
    # arguments.py d98e8a64: action='store_false' with dest= (:2944, :3160, :2630, :3118, :2437)
    "--no-gradient-accumulation-fusion": "gradient_accumulation_fusion",
    "--no-use-layer-wise-param-layout": "use_layer_wise_param_layout",
    "--muon-no-split-qkv": "muon_split_qkv",
    "--no-overlap-p2p-communication": "overlap_p2p_comm",
    "--no-position-embedding": "add_position_embedding",
}
"""Flags whose attribute is not their name (TransformerConfig `argparse_meta` arg_names and
`dest=` in arguments.py)."""
STORE_FALSE = frozenset(
    {
        "--disable-bias-linear",
        "--no-bias-swiglu-fusion",
        "--no-dsa-indexer-scoring-relu",
        "--no-rope-fusion",
        "--no-create-attention-mask-in-dataloader",
        "--no-check-for-nan-in-loss-and-grad",
        "--no-gradient-accumulation-fusion",
        "--no-use-layer-wise-param-layout",
        "--muon-no-split-qkv",
        "--no-overlap-p2p-communication",
        "--no-position-embedding",
    }
)
ONE_WORD_LISTS = frozenset(
    {"--moe-layer-freq", "--window-attn-skip-freq", "--linear-attention-freq"}
)
"""Flags whose argparse type evaluates a layer pattern to a list (arguments.py d98e8a64
`moe_freq_type`, `la_freq_type`, :327-375): the printed list is one word, the expression."""
ENUM_REPR = re.compile(r"<([A-Za-z_]\w*)\.([A-Za-z_]\w*): [^<>]*>")
"""An enum member in a printed list: Python's repr, `<CudaGraphModule.attn: 1>` (a list's
str() is its items' repr; arguments.py :294 leaves `cuda_graph_modules` as such members)."""
DTYPES = {
    "torch.float32": "fp32",
    "torch.bfloat16": "bf16",
    "torch.float16": "fp16",
    "torch.uint8": "fp8",
}
"""validate_args' dtype_map, read backwards."""
MOE_PREFIXES = ("--moe-", "--expert-", "--overlap-moe-")


def dest(flag: str) -> str:
    """The attribute Megatron stores a flag's value in."""
    return DEST.get(flag, flag[2:].replace("-", "_"))


def _value_words(flag: str, value: str, where: str) -> list[str]:
    if value in DTYPES:
        return [DTYPES[value]]
    if value.startswith("AttnBackend."):
        return [value.removeprefix("AttnBackend.")]
    if value.startswith("[") and value.endswith("]"):
        if flag in ONE_WORD_LISTS:
            return [value.replace(" ", "")]
        value = ENUM_REPR.sub(lambda m: repr(m.group(2)), value)
        try:
            items = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise InputError(f"{where}: {dest(flag)}: cannot read the list {value!r}") from None
        return [str(item) for item in items]
    return [value]


VISION_FLAGS = frozenset({"--img-h", "--img-w", "--patch-dim"})
"""Megatron-LM's vision arguments (arguments.py `_add_vision_args`, d98e8a64): parse_args adds
them for every script, so every log prints their defaults (img_h 224), LLaVA's or not."""

VLM_ARGS = ("disable_vision_class_token", "dataloader_seq_length")
"""Arguments only pretrain_vlm.py adds (`add_vlm_extra_args`): a log that prints one is LLaVA's."""


def words(run: LogRun) -> list[str]:
    """The flags of `megatron_flags.READ` that the run's printed arguments stand for."""
    args = run.args
    out: list[str] = []
    no_experts = args.get("num_experts", "None") == "None"
    dsa = args.get("experimental_attention_variant") == "dsa"
    # arguments.py's vision group prints for every script (--img-h 224): LLaVA's only where
    # pretrain_vlm.py's own arguments print beside it (add_vlm_extra_args)
    vlm = any(name in args for name in VLM_ARGS)
    interleaved = args.get("virtual_pipeline_model_parallel_size", "None") != "None"
    for flag in sorted(READ):
        if flag in VISION_FLAGS and not vlm:
            continue
        name = dest(flag)
        value = args.get(name)
        if value is None or value == "None":
            continue
        if no_experts and flag.startswith(MOE_PREFIXES):
            continue
        if "-dsa-" in flag and not dsa:
            continue  # the defaults of DeepSeek sparse attention's fields print too
        if flag == "--encoder-num-layers" and value == args.get("num_layers"):
            continue  # validate_args copies num_layers into it for GPT
        if flag == "--no-overlap-p2p-communication" and not interleaved:
            continue  # validate_args sets it False without interleaving (arguments.py :1012)
        if value in ("True", "False"):
            if (value == "False") == (flag in STORE_FALSE):
                out.append(flag)
            continue
        out.append(flag)
        out.extend(_value_words(flag, value, run.where(run.arg_lines.get(name))))
    if (
        args.get("use_layer_wise_distributed_optimizer") == "True"
        and "--use-distributed-optimizer" not in out
    ):
        # validate_args turns --use-distributed-optimizer (and --optimizer dist_muon) into the
        # layer-wise distributed optimizer and clears use_distributed_optimizer before printing
        # (arguments.py :1725-1736): the plan's ZeRO 1 with Muon
        out.append("--use-distributed-optimizer")
    return out


def world_size(run: LogRun) -> int | None:
    """The run's GPU count as printed (`world_size`), if it was; a printed value that is no
    positive count is refused, naming its line."""
    text = run.args.get("world_size")
    if text is None:
        return None
    where = run.where(run.arg_lines.get("world_size"))
    if not text.isdecimal() or not megatron_log.count(text, "world_size", where):
        raise InputError(f"{where}: world_size: {abbreviated(text)} (not a GPU count)")
    return int(text)


def reading(run: LogRun, gpu: str, num_gpus: int, vocab_size: int | None = None) -> Reading:
    """The run's arguments read as `check --megatron-args` reads a command line; messages name
    the arguments block's first line. The tokenizer's size: `vocab_size` (planner's
    `--vocab-size`) where given, else, where the block prints `padded_vocab_size` None, the
    size on the run's ` > padded vocab` line."""
    if run.args_line is None:
        raise InputError(f"{run.path}: no arguments block")
    where = f"{run.where(run.args_line)} (arguments block)"
    if vocab_size is None and run.args.get("padded_vocab_size", "None") == "None" and run.vocab:
        vocab_size = run.vocab.size  # the tokenizer's, printed after the block
    return read(shlex.join(words(run)), gpu, num_gpus, where, vocab_size)
