"""Megatron-LM's command-line flags as data, and what the reader makes of each one.

`megatron_flags.txt` (next to this module, shipped in the wheel) lists every option string
Megatron-LM's parser accepts (NVIDIA/Megatron-LM d98e8a64, the parser that pretrain_gpt.py
builds), each with the words it takes, their type and choices (`FlagSpec`; written by
benchmarks/megatron_flag_table.py, its header says how). It is read at the first use, not at
import; `megatron_choices` checks a line's words against it as argparse does.

A flag on a command line is one of:
- read: the reader (`megatron_args`) turns it into a plan field (`READ`);
- a Megatron-LM flag the reader does not read: it does not change memory or layout, and is
  ignored (listed with `check --verbose`); those that do change memory in ways planner does not
  model say so in a note (`NOT_MODELLED`);
- not a Megatron-LM flag (a launcher's, an inference script's): ignored and listed, unless it
  looks like a misspelt flag the reader reads (`typo_of`), which argparse would reject too
  (`allow_abbrev=False`) and which would change the layout if it were spelt right.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources

FLAGS_FILE = "megatron_flags.txt"


@dataclass(frozen=True)
class FlagSpec:
    """How Megatron-LM's parser takes one option string's words (a line of FLAGS_FILE, whose
    header says how each column is read from the source)."""

    nargs: str
    """'0' (a switch), '1' (argparse's nargs=None), '?', '+', '*', or a count."""
    type: str
    """What argparse calls on each word: str, bool, int, float, enum, one of arguments.py's own
    callables (tuple_type, ...), or '-' for a switch."""
    choices: tuple[str, ...] | None
    """The values accepted after conversion (an enum's member names), None for any."""
    where: str
    """The file and line (under megatron/) that adds it."""


TYPO_CUTOFF = 0.82
"""difflib similarity from which an unknown flag is taken for a misspelling of a flag the reader
reads. `--tensor-model-paralel-size` scores 0.98 against `--tensor-model-parallel-size`,
`--num-layer` 0.96 against `--num-layers`, `--tensor-parallel-size` 0.88, `--micro-batch` 0.84
against `--micro-batch-size`; the inference scripts' own flags in Megatron-LM's functional tests
score at most 0.80 (`--total-seq-length` against `--seq-length`) and must stay below it
(tests/inputs/test_megatron_flags.py)."""


@cache
def flag_specs() -> dict[str, FlagSpec]:
    """Every option string Megatron-LM's parser accepts, with how it takes its words (loaded
    once, at first use)."""
    text = resources.files("planner.inputs").joinpath(FLAGS_FILE).read_text(encoding="utf-8")
    specs = {}
    for line in text.splitlines():
        if line.startswith("--"):
            flag, nargs, kind, choices, where = line.split("\t")
            listed = None if choices == "-" else tuple(choices.split(","))
            specs[flag] = FlagSpec(nargs, kind, listed, where)
    return specs


@cache
def megatron_flags() -> frozenset[str]:
    """Every option string Megatron-LM's parser accepts (loaded once, at first use)."""
    return frozenset(flag_specs())


PRECISION_FLAGS: tuple[str, ...] = (
    "--bf16",
    "--fp8-format",
    "--fp8-recipe",
    "--fp8-param-gather",
    "--fp8-output-proj",
    "--fp4-format",
    "--fp4-recipe",
    "--fp4-param-gather",
    "--first-last-layers-bf16",
    "--num-layers-at-start-in-bf16",
    "--num-layers-at-end-in-bf16",
)
"""The precision flags the reader reads (`megatron_training`) and the launch writes
(`planner.emit.megatron`): bf16, FP8 with its recipe and param gather, the MXFP8 output layer,
NVFP4, and the layers kept in bf16."""

FP8_WGRAD_FLAGS = ("--no-fp8-wgrad", "--disable-fp8-wgrad")
"""The two spellings of fp8_wgrad False (TransformerConfig d98e8a64 transformer_config.py:631),
read as a no-op with a note (`megatron_dtypes.fp8_wgrad_note`); the launch does not write them."""

READ = frozenset(
    {
        # model shape
        "--num-layers",
        "--hidden-size",
        "--ffn-hidden-size",
        "--num-attention-heads",
        "--group-query-attention",
        "--num-query-groups",
        "--kv-channels",
        "--max-position-embeddings",
        "--position-embedding-type",
        "--use-rotary-position-embeddings",
        "--normalization",
        "--softmax-type",
        "--swiglu",
        "--squared-relu",
        "--quick-geglu",
        "--untie-embeddings-and-output-weights",
        "--disable-bias-linear",
        "--add-qkv-bias",
        "--qk-layernorm",
        "--attention-output-gate",
        "--multi-latent-attention",
        "--q-lora-rank",
        "--kv-lora-rank",
        "--qk-head-dim",
        "--qk-pos-emb-head-dim",
        "--v-head-dim",
        "--mtp-num-layers",
        "--num-experts",
        "--moe-router-topk",
        "--moe-ffn-hidden-size",
        "--moe-shared-expert-intermediate-size",
        "--moe-latent-size",
        "--moe-router-score-function",
        "--moe-apply-probs-on-input",
        "--qk-l2-norm",
        "--no-rope-freq",
        "--moe-layer-freq",
        "--window-size",
        "--window-attn-skip-freq",
        "--moe-router-num-groups",
        "--moe-router-group-topk",
        "--moe-expert-capacity-factor",
        "--moe-expert-rank-capacity-factor",
        "--moe-paged-stash",
        "--moe-paged-stash-buffer-size-factor-cuda",
        "--moe-pad-expert-input-to-capacity",
        "--moe-router-force-load-balancing",
        "--moe-router-dtype",
        # the experts' fused grouped MLP (megatron_training._fused_grouped_mlp)
        "--use-transformer-engine-op-fuser",
        "--moe-use-grouped-tensor",
        "--moe-grouped-gemm",
        "--moe-mlp-glu-interleave-size",
        "--use-checkpoint-args",
        # vocabulary
        "--vocab-size",
        "--padded-vocab-size",
        "--make-vocab-size-divisible-by",
        "--tokenizer-type",
        "--tokenizer-model",
        "--tiktoken-pattern",
        "--vocab-file",
        # hybrid Mamba stacks
        "--hybrid-layer-pattern",
        "--hybrid-override-pattern",
        "--is-hybrid-model",
        "--mtp-hybrid-override-pattern",
        "--mtp-use-repeated-layer",
        "--mamba-state-dim",
        "--mamba-head-dim",
        "--mamba-num-groups",
        "--mamba-num-heads",
        # gated delta nets (megatron_gdn); the variant also says DSA (megatron_dsa)
        "--experimental-attention-variant",
        "--linear-attention-freq",
        "--linear-conv-kernel-dim",
        "--linear-key-head-dim",
        "--linear-value-head-dim",
        "--linear-num-key-heads",
        "--linear-num-value-heads",
        # DeepSeek sparse attention (megatron_dsa.FLAGS)
        "--dsa-indexer-n-heads",
        "--dsa-indexer-head-dim",
        "--dsa-indexer-topk",
        "--dsa-kernel-backend",
        "--dsa-indexer-loss-coeff",
        "--dsa-indexer-use-sparse-loss",
        "--dsa-indexer-topk-freq",
        "--dsa-indexer-skip-topk-offset",
        "--no-dsa-indexer-scoring-relu",
        "--disable-dsa-indexer-scoring-relu",
        # T5's encoder and decoder (megatron_t5)
        "--encoder-num-layers",
        "--decoder-num-layers",
        "--encoder-seq-length",
        "--decoder-seq-length",
        # layout
        "--tensor-model-parallel-size",
        "--pipeline-model-parallel-size",
        "--context-parallel-size",
        "--hierarchical-context-parallel-sizes",
        "--cp-comm-type",
        "--expert-model-parallel-size",
        "--expert-tensor-parallel-size",
        "--sequence-parallel",
        "--num-layers-per-virtual-pipeline-stage",
        "--num-virtual-stages-per-pipeline-rank",
        "--microbatch-group-size-per-virtual-pipeline-stage",
        "--decoder-first-pipeline-num-layers",
        "--decoder-last-pipeline-num-layers",
        "--pipeline-model-parallel-layout",
        "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split",
        "--tp-comm-overlap",  # and what it overlaps: megatron_tp_overlap
        "--disable-tp-comm-overlap-ag",
        "--no-tp-comm-overlap-ag",
        "--disable-tp-comm-overlap-rs",
        "--no-tp-comm-overlap-rs",
        "--disable-tp-comm-bulk-dgrad",
        "--no-tp-comm-bulk-dgrad",
        "--disable-tp-comm-bulk-wgrad",
        "--no-tp-comm-bulk-wgrad",
        "--tp-comm-overlap-rs-dgrad",
        "--tp-comm-overlap-cfg",
        "--overlap-moe-expert-parallel-comm",
        "--moe-token-dispatcher-type",
        "--moe-flex-dispatcher-backend",
        "--moe-flex-dispatcher-num-sms",
        "--moe-deepep-num-sms",
        "--moe-hybridep-num-sms",
        # data parallelism and optimizer
        "--use-distributed-optimizer",
        "--optimizer",  # muon (megatron_training._muon); the others: NOT_MODELLED
        "--no-use-layer-wise-param-layout",
        "--muon-num-ns-steps",
        "--muon-tp-mode",
        "--muon-no-split-qkv",
        "--muon-nesterov",
        "--muon-fp32-matmul-prec",
        "--use-megatron-fsdp",
        "--use-torch-fsdp2",
        "--data-parallel-sharding-strategy",
        "--megatron-fsdp-main-grads-dtype",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
        "--ddp-bucket-size",
        "--ddp-num-buckets",
        "--grad-reduce-in-bf16",
        "--accumulate-allreduce-grads-in-fp32",
        "--use-precision-aware-optimizer",
        "--main-grads-dtype",
        "--exp-avg-dtype",
        "--exp-avg-sq-dtype",
        "--optimizer-cpu-offload",
        "--optimizer-offload-fraction",
        "--overlap-cpu-optimizer-d2h-h2d",
        # batch, recompute, offloading
        "--seq-length",
        "--micro-batch-size",
        "--global-batch-size",
        "--step-batch-size-schedule",
        "--recompute-granularity",
        "--recompute-activations",
        "--checkpoint-activations",  # refused, as Megatron exits on it
        # read only for what Megatron refuses (megatron_asserts)
        "--batch-size",
        "--warmup",
        "--model-parallel-size",
        "--no-position-embedding",
        "--ckpt-format",
        "--no-gradient-accumulation-fusion",
        "--no-overlap-p2p-communication",
        "--main-params-dtype",
        "--tensor-parallel-num-weight-shards",  # refused beyond tp (megatron_layout)
        "--expert-tensor-parallel-num-weight-shards",
        "--recompute-method",
        "--recompute-num-layers",
        "--recompute-modules",
        "--moe-layer-recompute",
        "--cpu-offloading-num-layers",
        "--defer-embedding-wgrad-compute",
        "--use-tp-pp-dp-mapping",
        "--moe-shared-expert-overlap",
        "--wgrad-deferral-limit",
        "--fine-grained-activation-offloading",
        "--offload-modules",
        "--activation-offload-fraction",
        "--fine-grained-offloading-max-inflight-offloads",  # checked (megatron_training)
        "--no-check-for-nan-in-loss-and-grad",  # checked beside full-iteration graphs
        "--loss-scale",  # (fp16's dynamic scaling turns the check off)
        # precision and kernels
        *PRECISION_FLAGS,
        *FP8_WGRAD_FLAGS,
        "--fp16",
        "--attention-backend",
        "--flash-attention-version",  # with --attention-backend flash: attention_kernel
        "--transformer-impl",
        "--spec",
        "--no-bias-swiglu-fusion",
        "--use-fused-weighted-squared-relu",  # an MoE's squared ReLU: training.fused_swiglu
        "--no-rope-fusion",
        "--num-distributed-optimizer-instances",
        "--outer-dp-sharding-strategy",
        "--cross-entropy-loss-fusion",
        "--cross-entropy-fusion-impl",
        "--log-params-norm",
        "--log-num-zeros-in-grad",
        "--test-mode",
        "--no-create-attention-mask-in-dataloader",  # training.dataloader_attention_mask
        "--check-weight-hash-across-dp-replicas-interval",
        "--perform-rl-step",
        "--attention-dropout",
        "--hidden-dropout",
        "--img-h",
        "--img-w",
        "--patch-dim",
        "--inference-dynamic-batching-buffer-size-gb",
        "--rl-inference-tensor-model-parallel-size",
        "--rl-inference-pipeline-model-parallel-size",
        "--rl-inference-expert-model-parallel-size",
        "--rl-inference-expert-tensor-model-parallel-size",
        "--cuda-graph-impl",
        "--enable-cuda-graph",
        "--external-cuda-graph",
        "--cuda-graph-modules",
        "--cuda-graph-scope",
        "--deterministic-mode",  # training.deterministic (and a note on Blackwell)
    }
)
"""The flags the reader reads (each one of `megatron_flags()`)."""

NOT_MODELLED: dict[str, str] = {
    "--megatron-fsdp-main-params-dtype": "a main-weight dtype other than fp32 is counted as fp32",
    "--disable-mamba-mem-eff-path": "the Mamba mixer's unfused path keeps more activations than "
    "the fused one planner counts (memory under-estimated)",
    "--optimizer": "optimizers other than Adam and Muon are counted with Adam's two moments",
    "--use-checkpoint-args": "at run time the checkpoint's saved arguments (model shape, "
    "vocabulary) replace the line's; planner reads the line's",
    "--batch-invariant-mode": "batch-invariant kernels (TransformerConfig d98e8a64 "
    "transformer_config.py:1184-1189: 'will significantly affect speed') are timed as the "
    "default kernels (step time under-estimated)",
    "--keep-fp8-transpose-cache": "Megatron-FSDP then keeps each FP8 weight's transpose through "
    "the step (about one byte per parameter, its README says), which is not counted (memory "
    "under-estimated)",
}
"""Megatron-LM flags that change memory in ways planner does not model: present (with a value
other than Megatron's default), they are read as the note says."""

NOT_MODELLED_DEFAULTS: dict[str, tuple[str, ...]] = {
    "--megatron-fsdp-main-params-dtype": ("fp32",),
    "--optimizer": ("adam", "muon", "dist_muon"),  # Muon: planner.model.optimizer_states
}
"""The values of NOT_MODELLED flags that are Megatron's defaults or that planner models (no
note then)."""


REFUSED: dict[str, str] = {
    "--enable-mhc-connections": "hyper-connections carry --mhc-num-residual-streams (4 by "
    "default) residual streams through every layer (TransformerConfig d98e8a64), which "
    "planner's activations do not count",
    "--heterogeneous-layers-config-path": "each layer's shape then comes from that file "
    "(HeterogeneousTransformerConfig), which planner does not read",
    "--heterogeneous-layers-config-encoded-json": "each layer's shape then comes from that "
    "JSON (HeterogeneousTransformerConfig), which planner does not read",
    "--fp32-residual-connection": "the residual stream, and the tensors the pipeline sends, are "
    "then fp32 (TransformerConfig), which planner counts in bf16",
    "--te-precision-config-file": "each matching module then runs the quantization recipe that "
    "YAML names (d98e8a64 argument_utils.py:365-368 load_quantization_recipe, "
    "arguments.py:2020-2022), a file planner does not read: planner does not model per-module "
    "precision overrides",
}
"""Megatron-LM flags that change memory in ways planner does not model and that it cannot bound
by a note: a line with one is refused (exit 2) rather than judged with the memory under-counted.
The tensor-parallel weight shards (GTP) are refused where they shard (`megatron_layout`)."""


SCRIPT_FLAGS = frozenset({"--dataloader-seq-length", "--disable-vision-class-token"})
"""Flags of Megatron-LM's example scripts, not of its parser, that the reader reads as they are
(pretrain_vlm.py's: `megatron_args_memory.vision`): never taken for a misspelling
(`--dataloader-seq-length` is 0.84 alike to `--decoder-seq-length`)."""


FORK_FLAGS = frozenset({"--patch-tokenizer-type", "--extra-vocab-size"})
"""Flags of Megatron-LM derivatives' own training scripts, never taken for a misspelling: Alibaba's
Pai-Megatron-Patch (its tokenizer, `--patch-tokenizer-type Qwen2Tokenizer`, and the rows it adds
to it, `--extra-vocab-size`; in its example scripts across models). They are listed as not
Megatron-LM flags: the vocabulary is then `--vocab-size`'s, the tokenizer's plus the extra rows."""


def typo_of(flag: str, read: Iterable[str] = READ) -> str | None:
    """The flag the reader reads that `flag` (not a Megatron-LM flag) is probably a misspelling
    of: the same flag with `_` for `-` or in other case, or one at least TYPO_CUTOFF alike; never
    one of SCRIPT_FLAGS or FORK_FLAGS."""
    if flag in SCRIPT_FLAGS or flag in FORK_FLAGS:
        return None
    names = sorted(read)
    normal = flag.replace("_", "-").lower()
    if normal in names:
        return normal
    close = difflib.get_close_matches(normal, names, n=1, cutoff=TYPO_CUTOFF)
    return close[0] if close else None
