"""Megatron-LM training flags that change what a GPU holds or how long a step takes, read into
the plan's `[training]` table by `planner.inputs.megatron_args`: the partial distributed
optimizer, the native fused cross entropy, attention and hidden dropout, the RL step's rollout
engine, LLaVA's vision encoder and the MIMO example's frozen language model (their memory:
`planner.model.memory`,
`planner.model.loss_activations.COMPILED_LOSS_EXTRA_BYTES_PER_LOGIT`, `planner.model.scores`,
`planner.model.rl_inference`, `planner.model.vision`), and the per-step gradient statistics
(`planner.model.cost.GRAD_STATS_S`), weight-hash check (`planner.model.weight_hash`) and
deterministic mode (`planner.model.determinism`)."""

from __future__ import annotations

from typing import Any

from planner.inputs.errors import InputError
from planner.inputs.megatron_line import Line

HASH_FLAG = "--check-weight-hash-across-dp-replicas-interval"
"""Every this many steps, each rank hashes its weights on the host (`planner.model.weight_hash`)."""
RL_KV_CACHE_GIB = 40.0
"""--inference-dynamic-batching-buffer-size-gb's default (Megatron-LM d98e8a64 arguments.py)."""


TE_LOSS_NOTE = (
    "--cross-entropy-loss-fusion --cross-entropy-fusion-impl te: read as Transformer Engine's "
    "fused loss, as Megatron-LM before 168cb15d (2026-06-03) runs it; from that commit on "
    "(d98e8a64 included) validate_args asserts against the pair (TE's fused cross entropy "
    "disabled for stability): there use --cross-entropy-fusion-impl native"
)
"""The note of a line that asks for Transformer Engine's fused loss (Megatron-LM d98e8a64
arguments.py; benchmarks/data/megatron_rules.md section 13): the Megatron-MoE-ModelZoo scripts
of May 2026 still do, on the Megatron-LM of their day."""


def training_flags(line: Line, parallel: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """`[training]` fields of these flags, where they differ from the defaults; how they were
    read where a Megatron-LM of another date reads them otherwise, to `notes`."""
    out: dict[str, Any] = {}
    if (n := line.integer("--num-distributed-optimizer-instances") or 1) > 1:
        out["optimizer_instances"] = n
    if line.text("--outer-dp-sharding-strategy") == "optim":
        out["outer_dp_sharding_strategy"] = "optim"
    fused = line.has("--cross-entropy-loss-fusion")
    impl = line.text("--cross-entropy-fusion-impl")
    if fused and impl == "te":
        notes.append(TE_LOSS_NOTE)
    out.update(loss_fields(fused, impl))
    if line.has("--log-params-norm") or line.has("--log-num-zeros-in-grad"):
        out["log_grad_stats"] = True
    if line.has("--test-mode"):
        out["test_mode"] = True
    if not mask_off(line):  # Megatron's default: built
        out["dataloader_attention_mask"] = True
    # torch FSDP2 (which asserts the flag, arguments.py:1040) keeps no main gradients: its
    # reduce-scatter reads .grad, as planner times ZeRO 3 with the fusion
    if line.has("--no-gradient-accumulation-fusion") and not line.has("--use-torch-fsdp2"):
        out["gradient_accumulation_fusion"] = False  # planner.model.wgrad_accumulation
    if line.has("--async-save"):
        out.update(_async_save(line, notes))
    if line.has("--deterministic-mode"):
        out["deterministic"] = True
    if (hashed := line.integer(HASH_FLAG)) is not None:
        if hashed < 1:  # Megatron takes `iteration % N`: 0 divides by zero
            msg = f"expected a positive integer (got {hashed})"
            raise InputError(f"{line.where}: {HASH_FLAG}: {msg}")
        out["weight_hash_interval"] = hashed
    if line.number("--attention-dropout") == 0:  # Megatron's default is 0.1
        out["attention_dropout"] = False
    if line.number("--hidden-dropout") == 0:  # likewise
        out["hidden_dropout"] = False
    out.update(softmax_fields(line))
    out.update(_rl_step(line, parallel))
    return out


def mask_off(line: Line) -> bool:
    """Whether the dataloader builds no attention mask: --no-create-attention-mask-in-dataloader,
    or --dataloader-inter-document-masking, under which validate_args turns
    create_attention_mask_in_dataloader off (d98e8a64 arguments.py:1340-1344)."""
    return line.has("--no-create-attention-mask-in-dataloader") or line.has(
        "--dataloader-inter-document-masking"
    )


ASYNC_SAVE_NOTE = (
    "--async-save: read off without --use-persistent-ckpt-worker, as Megatron-LM runs it: "
    "validate_args turns it off for a distributed checkpoint (d98e8a64 arguments.py:1814-1820), "
    "and a legacy one (--ckpt-format torch) cannot save asynchronously (checkpointing.py:764-767)"
)
"""How a line with --async-save but no persistent worker is read: no worker, no second context."""


def _async_save(line: Line, notes: list[str]) -> dict[str, Any]:
    """training.async_save of a line with --async-save: the persistent worker's process (and its
    CUDA context) exists only with --use-persistent-ckpt-worker beside it (d98e8a64
    training/initialize.py:79-80)."""
    if line.has("--use-persistent-ckpt-worker"):
        return {"async_save": True}
    notes.append(ASYNC_SAVE_NOTE)
    return {}


def loss_fields(fused: bool | None, impl: str | None) -> dict[str, bool]:
    """`[training]` loss fields from Megatron's two settings (--cross-entropy-loss-fusion and
    --cross-entropy-fusion-impl; TransformerConfig cross_entropy_loss_fusion / _fusion_impl, the
    impl "native" by default): not fused, Megatron's unfused loss (loss_fusion False); fused
    with the native impl, the compiled kernel and its extra fp32 copy (compiled_loss_fusion;
    Transformer Engine's kernel works in place); `fused` None (not set) leaves the defaults."""
    if fused is None:
        return {}
    if not fused:
        return {"loss_fusion": False}
    return {"compiled_loss_fusion": True} if (impl or "native") == "native" else {}


def _rl_step(line: Line, parallel: dict[str, Any]) -> dict[str, Any]:
    """train_rl.py's rollout engine: its KV cache and the degrees of a separate inference model
    (Megatron-LM d98e8a64 training.py builds one when any is given or training uses CP; the
    training degrees where one is not given)."""
    if not line.has("--perform-rl-step"):
        return {}
    kv = line.number("--inference-dynamic-batching-buffer-size-gb")
    out: dict[str, Any] = {"rl_kv_cache_gib": RL_KV_CACHE_GIB if kv is None else kv}
    names = ("tensor", "pipeline", "expert", "expert-tensor")
    given = [line.integer(f"--rl-inference-{n}-model-parallel-size") for n in names]
    if any(g is not None for g in given) or parallel.get("cp", 1) > 1:
        tp, pp, ep = (parallel.get(k, 1) for k in ("tp", "pp", "ep"))
        own = (tp, pp, ep, parallel.get("etp") or tp)
        out["rl_inference_parallel"] = [
            o if g is None else g for g, o in zip(given, own, strict=True)
        ]
    return out


MIMO_FROZEN_PROVIDERS = ("llava_vlm", "video_llava_vlm")
"""examples/mimo/train.py's --model-provider values whose builder freezes the language model and
the vision encoder (model_providers/llava_vlm.py, Megatron-LM d98e8a64: requires_grad False on
both; only the vision projection trains)."""

MIMO_HETERO_FLAGS = (
    "--llm-tp",
    "--llm-pp",
    "--llm-cp",
    "--llm-dp",
    "--llm-ep",
    "--llm-expt-tp",
    "--llm-offset",
    "--llm-only",
    "--encoder-tp",
    "--encoder-dp",
)
"""The heterogeneous grids of examples/mimo/pretrain_mimo.py (the argument parser beside it,
Megatron-LM d98e8a64): the language model and the encoder each on ranks of their own."""

MIMO_TOTAL_SEQ_DEFAULT = 512
"""examples/mimo/train.py --total-seq-length default."""


def mimo(line: Line, training: dict[str, Any]) -> list[str]:
    """Megatron-LM's MIMO example (examples/mimo/train.py, d98e8a64), its own flags: with a LLaVA
    provider of MIMO_FROZEN_PROVIDERS the language model, which is what planner sizes, is frozen
    (`frozen_model`); its samples hold at most --total-seq-length tokens, image and text (the
    Energon task encoder packs to it or pads each batch to its longest sample; the mock data is
    that long), which is the sequence planner counts: an upper bound, on the safe side. The CLIP
    encoder (frozen: its forward only, nothing kept for a backward) and the projector are not
    counted. Returns what the line does that planner does not model."""
    own = line.flags
    hetero = [f for f in MIMO_HETERO_FLAGS if f in own]
    if hetero:
        raise InputError(
            f"{line.where}: {hetero[0]}: examples/mimo/pretrain_mimo.py places the language model "
            "and the encoder on ranks of their own (--llm-* and --encoder-* grids), which planner "
            "does not model"
        )
    if (own.get("--model-provider") or [""])[0] not in MIMO_FROZEN_PROVIDERS:
        return []
    training["frozen_model"] = True
    total = (own.get("--total-seq-length") or [str(MIMO_TOTAL_SEQ_DEFAULT)])[0]
    training["seq_length"] = _positive(total, "--total-seq-length", line.where)
    if "--language-model-checkpoint" not in own:
        return []
    return [
        "--language-model-checkpoint: loading the language model's checkpoint before training "
        "(load_submodule_ckpt) is not modelled; what it holds while loading can exceed the "
        "training peak"
    ]


BLACKWELL_DETERMINISTIC = (
    "--deterministic-mode: on Blackwell, Transformer Engine does not run the attention backward "
    "on cuDNN's fused kernel in deterministic mode before cuDNN 9.18.1 (TransformerEngine PRs "
    "#2130, #2584) and falls back to flash-attn's kernels, whose speed there is not modelled; "
    "Megatron-LM's GB200 functional tests of a 7B model at 8k tokens run 1.7-1.8x the predicted "
    "step"
)
"""What `deterministic_note` says."""


def deterministic_note(line: Line, blackwell: bool) -> list[str]:
    """The not-modelled note of --deterministic-mode on a Blackwell GPU (BLACKWELL_DETERMINISTIC);
    on Hopper TE keeps cuDNN's fused attention, with its deterministic backward, and on Ampere it
    runs FlashAttention-2's deterministic backward (cuDNN's fused backend needs sm90 in
    deterministic mode: get_attention_backend, TransformerEngine d0067d0d), the kernel planner
    times there anyway. What the mode costs elsewhere is `planner.model.determinism`'s."""
    if not (blackwell and line.has("--deterministic-mode")):
        return []
    return [BLACKWELL_DETERMINISTIC]


MXFP8_OWN_BUFFER = (
    "--fp8-param-gather with --fp8-recipe mxfp8 without --reuse-grad-buf-for-mxfp8-param-ag: "
    "Megatron's DDP then backs every parameter with a persistent parameter buffer of its own "
    "(d98e8a64 param_and_grad_buffer.py:1245-1263; optimizer_config.py:416-422 warns of "
    "'significant additional GPU memory'), mapping each MXFP8 weight into it through Transformer "
    "Engine's replace_raw_data, which TransformerEngine 002a3e57 does not support for MXFP8 "
    "(arguments.py:1580-1584): planner counts the run with the flag, the gather through the "
    "gradient buffer, as planner's launch writes it (memory under-estimated if it runs)"
)
"""What `mxfp8_gather_note` says."""


def mxfp8_gather_note(line: Line, training: dict[str, Any], parallel: dict[str, Any]) -> list[str]:
    """The not-modelled note of an MXFP8 parameter gather by Megatron's distributed optimizer
    (ZeRO 1; Megatron-FSDP turns the reuse off and gathers its own way) without
    --reuse-grad-buf-for-mxfp8-param-ag (MXFP8_OWN_BUFFER): `planner.model.stage_sync`
    `gathers_in_grad_buffer` is the path planner prices."""
    gather = training.get("fp8_param_gather") and training.get("fp8_recipe") == "mxfp8"
    if not gather or parallel.get("zero_stage", 0) != 1:
        return []
    return [] if line.has("--reuse-grad-buf-for-mxfp8-param-ag") else [MXFP8_OWN_BUFFER]


DETERMINISTIC_SINKS = (
    "--deterministic-mode with --softmax-type {kind}: Transformer Engine disables its fused "
    "attention for attention sinks in deterministic mode (they need "
    "NVTE_ALLOW_NONDETERMINISTIC_ALGO=1, get_attention_backend, TransformerEngine d0067d0d) and "
    "runs the unfused attention, whose time and seq^2 scores are not modelled (both "
    "under-estimated)"
)
"""What `deterministic_sinks_note` says."""


def deterministic_sinks_note(line: Line, model: dict[str, object]) -> list[str]:
    """The not-modelled note of --deterministic-mode with attention sinks (DETERMINISTIC_SINKS),
    on any GPU."""
    kind = model.get("softmax_type", "vanilla")
    if kind == "vanilla" or not line.has("--deterministic-mode"):
        return []
    return [DETERMINISTIC_SINKS.format(kind=kind)]


def _positive(text: str, flag: str, where: str) -> int:
    """A script's own integer flag (not Megatron's: `Line.integer` reads those)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise InputError(f"{where}: {flag}: expected a positive integer (got {text!r})")
    return value


def vision(
    line: Line, model: dict[str, Any], parallel: dict[str, Any], training: dict[str, Any]
) -> None:
    """Megatron's LLaVA (pretrain_vlm.py, Megatron-LM d98e8a64; --img-h is its flag): the
    language model runs on --dataloader-seq-length (default --seq-length) text tokens plus the
    image's embeddings, padded for SP / CP (multimodal/context_parallel.py `get_padding`), with
    max_position_embeddings raised to it; the vision transformer (`planner.model.vision`) on the
    image's patches and one class token (clip_vit_model.py: --disable-vision-class-token drops
    it from the embeddings the language model gets, not from the encoder). --dataloader-seq-length
    and --disable-vision-class-token are pretrain_vlm.py's own flags (not in arguments.py)."""
    own = line.flags  # pretrain_vlm.py's own flags, read from the words as they are
    built = [f for f in ("--language-model-type", "--vision-model-type") if f in own]
    if built:
        raise InputError(
            f"{line.where}: {built[0]}: Megatron-LM's examples/multimodal (NVLM, LLaVA-style "
            "training with train.py) builds its language and vision models from "
            "--language-model-type and --vision-model-type (examples/multimodal/config.py: MLP "
            "widths, activations, the vision encoder's own shape) and freezes them with "
            "--freeze-LM / --freeze-ViT, which planner does not model"
        )
    img_h = line.integer("--img-h")
    if img_h is None:
        return
    patch = line.integer("--patch-dim") or 16  # arguments.py defaults: 16, img-w 224
    patches = (img_h // patch) * ((line.integer("--img-w") or 224) // patch)
    embeddings = patches + (0 if "--disable-vision-class-token" in own else 1)
    text = (own.get("--dataloader-seq-length") or [str(training["seq_length"])])[0]
    if not text.isdecimal():
        raise InputError(
            f"{line.where}: --dataloader-seq-length: expected a whole number of tokens (got "
            f"{text!r})"
        )
    seq = int(text) + embeddings
    tp, cp, sp = parallel.get("tp", 1), parallel.get("cp", 1), parallel.get("sequence_parallel")
    factor = tp * cp * 2 if sp and cp > 1 else cp * 2 if cp > 1 else tp if sp else 1
    training["seq_length"] = -(-seq // factor) * factor
    if "max_position_embeddings" in model:
        model["max_position_embeddings"] = max(model["max_position_embeddings"], seq)
    # args.encoder_num_layers: --encoder-num-layers or --num-layers (validate_args, never both)
    layers = line.integer("--encoder-num-layers") or line.integer("--num-layers")
    layers = layers or model["num_layers"]
    training["vision_encoder"] = [layers, patches + 1, patch]


def softmax_fields(line: Line) -> dict[str, Any]:
    """Which unfused attention keeps the scores (`planner.model.scores`): Megatron-Core's own
    under --transformer-impl local or --attention-backend local, its torch softmax in fp32 with
    --attention-softmax-in-fp32 or --apply-query-key-layer-scaling (d98e8a64 arguments.py:1714-1715;
    TransformerConfig's attention_softmax_in_fp32, false from the command line otherwise); and
    --no-masked-softmax-fusion (arguments.py:2887-2891), which only that attention reads."""
    out: dict[str, Any] = {}
    if line.text("--transformer-impl") == "local" or line.text("--attention-backend") == "local":
        # looked up, not read: outside READ, so that NeMo's overrides of the two (whose TE
        # attention ignores them) stay harmless (nemo_keys.classify refuses READ flags)
        wide = {"--attention-softmax-in-fp32", "--apply-query-key-layer-scaling"} & set(line.flags)
        out["unfused_attention"] = "local_fp32" if wide else "local"
    if line.has("--no-masked-softmax-fusion"):
        out["masked_softmax_fusion"] = False
    return out
