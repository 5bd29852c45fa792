"""The DeepSeek sparse attention half of a Megatron-LM command line: --experimental-attention-
variant dsa with the --dsa-indexer-* sizes as model fields (`ModelArch.dsa_indexer_*`,
`planner.model.dsa`), and the kernel backend and the indexer loss as training fields.

Megatron-LM d98e8a64 (transformer_config.py TransformerConfig's DSA fields, whose --dsa-* flags
arguments.py generates from the dataclass; experimental_attention_variant/dsa.py,
dsa_kernels.py, dsa_cudnn_kernels.py): "dsa" builds every attention layer of a transformer stack
as MLA with the lightning indexer and top-k sparse attention. The indexer's heads, head dim and
top-k have no defaults (DSAIndexer cannot be built without them): a line without one is refused.
--dsa-kernel-backend (none | tilelang | cudnn, default none), --dsa-indexer-loss-coeff (None, read
as 0: no indexer loss; a negative one runs none either, `coeff > 0`) and
--dsa-indexer-use-sparse-loss go to `[training]`. Megatron runs none of the fused kernels under
--attention-backend unfused (`use_fused_dsa_kernels`): tilelang or cudnn is then read as none,
with a note. Megatron asserts no RoPE fusion (on by default; validate_args turns it off for
positions other than rope): a rope line without --no-rope-fusion is refused. The cuDNN kernels
raise RuntimeError without the indexer's ReLU scoring (`_assert_supported_indexer_scoring`):
--no-dsa-indexer-scoring-relu with cudnn is refused. Top-k sharing across layers
(--dsa-indexer-topk-freq F > 1, from --dsa-indexer-skip-topk-offset) is not modelled: every layer
is counted with its own indexer and top-k (noted). The flags that only change the numerics (RoPE
interleaving, the Hadamard rotation, the key norm's epsilon and fp32 input) are Megatron flags
the reader does not read (listed as ignored). A hybrid stack's D layers are refused by the
pattern's reader (`planner.inputs.hybrid.parse`), and so is the variant beside a hybrid pattern.
"""

from __future__ import annotations

from typing import Any, get_args

from planner.inputs.errors import InputError
from planner.inputs.megatron_line import Line
from planner.inputs.plan_types import DsaKernelBackend

VARIANT_FLAG = "--experimental-attention-variant"
VARIANT = "dsa"
SIZES = {
    "--dsa-indexer-n-heads": "dsa_indexer_n_heads",
    "--dsa-indexer-head-dim": "dsa_indexer_head_dim",
    "--dsa-indexer-topk": "dsa_indexer_topk",
}
"""The indexer's sizes (required) -> ModelArch fields."""
BACKEND_FLAG = "--dsa-kernel-backend"
BACKENDS: tuple[str, ...] = get_args(DsaKernelBackend)
NO_RELU_FLAGS = ("--no-dsa-indexer-scoring-relu", "--disable-dsa-indexer-scoring-relu")
"""The two spellings of dsa_indexer_scoring_relu = False (a store_false TransformerConfig field)."""
FLAGS = (
    *SIZES,
    BACKEND_FLAG,
    "--dsa-indexer-loss-coeff",
    "--dsa-indexer-use-sparse-loss",
    "--dsa-indexer-topk-freq",
    "--dsa-indexer-skip-topk-offset",
    *NO_RELU_FLAGS,
)
"""The --dsa-* flags the reader reads (`megatron_flags.READ`)."""


def is_dsa(line: Line) -> bool:
    """Whether the line asks for DeepSeek sparse attention."""
    return line.text(VARIANT_FLAG) == VARIANT


def model_fields(line: Line, hybrid: bool, missing: list[str]) -> dict[str, Any]:
    """The DSA model fields of a line (`hybrid`: a hybrid stack, refused with the variant); {}
    where the line does not ask for DSA. What is not modelled is appended to `missing`."""
    if not is_dsa(line):
        return {}
    where = line.where
    if hybrid:
        raise InputError(
            f"{where}: {VARIANT_FLAG} dsa: DeepSeek sparse attention in a hybrid stack is not "
            "modelled; planner models it in a transformer stack (pretrain_gpt.py)"
        )
    out: dict[str, Any] = {}
    for flag, field in SIZES.items():
        value = line.integer(flag)
        if value is None:
            raise InputError(
                f"{where}: {flag}: required with {VARIANT_FLAG} dsa (Megatron-LM has no default: "
                "the indexer cannot be built without it)"
            )
        out[field] = value
    freq = _at_least(line, "--dsa-indexer-topk-freq", 1)
    offset = _at_least(line, "--dsa-indexer-skip-topk-offset", 0)
    if freq is not None and freq > 1:  # at frequency 1 every layer computes, whatever the offset
        missing.append(
            f"--dsa-indexer-topk-freq {freq} (--dsa-indexer-skip-topk-offset {offset or 0}): "
            "top-k sharing across layers is not modelled; every layer is counted with its own "
            "indexer and top-k (the indexer's parameters, time and memory over-estimated)"
        )
    return out


def _at_least(line: Line, flag: str, least: int) -> int | None:
    """An integer flag Megatron-LM raises ValueError below `least` for (dsa.py
    `is_dsa_skip_topk_layer`); None when absent."""
    value = line.integer(flag)
    if value is not None and value < least:
        raise InputError(f"{line.where}: {flag}: expected at least {least} (got {value})")
    return value


def training_fields(line: Line, notes: list[str]) -> dict[str, Any]:
    """The DSA `[training]` fields of a line; {} where the line does not ask for DSA. How the line
    was read is appended to `notes`."""
    if not is_dsa(line):
        return {}
    where = line.where
    backend = line.text(BACKEND_FLAG) or "none"
    if backend not in BACKENDS:
        raise InputError(
            f"{where}: {BACKEND_FLAG}: expected one of {', '.join(BACKENDS)} (got {backend!r})"
        )
    no_relu = next((f for f in NO_RELU_FLAGS if line.has(f)), None)
    if backend == "cudnn" and no_relu is not None:
        raise InputError(
            f"{where}: {no_relu}: cannot be combined with {BACKEND_FLAG} cudnn (Megatron-LM's "
            "cuDNN DSA kernels raise RuntimeError without the indexer's ReLU scoring)"
        )
    if backend != "none" and line.text("--attention-backend") == "unfused":
        notes.append(
            f"{BACKEND_FLAG} {backend}: read as none (Megatron-LM runs no fused DSA kernel under "
            "--attention-backend unfused)"
        )
        backend = "none"
    position = line.text("--position-embedding-type")
    if (position == "rope" or line.has("--use-rotary-position-embeddings")) and not line.has(
        "--no-rope-fusion"
    ):
        raise InputError(
            f"{where}: --no-rope-fusion: required with {VARIANT_FLAG} dsa and rope positions "
            "(Megatron-LM asserts RoPE fusion is not supported for DSAttention; validate_args "
            "turns it off for the other position embeddings only)"
        )
    out: dict[str, Any] = {"dsa_kernel_backend": backend}
    coeff = line.number("--dsa-indexer-loss-coeff")
    if coeff is not None and coeff < 0:
        notes.append(
            f"--dsa-indexer-loss-coeff {coeff:g}: read as 0 (Megatron-LM runs the indexer loss "
            "only for a positive coefficient)"
        )
        coeff = 0.0
    if coeff:
        out["dsa_indexer_loss_coeff"] = coeff
    if line.has("--dsa-indexer-use-sparse-loss"):
        out["dsa_indexer_use_sparse_loss"] = True
    return out
