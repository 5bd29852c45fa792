"""NeMo 2.0 overrides that `nemo_args` does not turn into plan fields, and what a line that holds
one is told: a note where NeMo runs the setting and it changes memory or time in a way planner
does not price (`NOTED`), a note where NeMo writes another setting over it before the model is
built (`OVERWRITTEN`), a refusal where planner cannot bound what it changes (`REFUSED`) or
the key names no field of NeMo's model config (`NOT_FIELDS`).

Megatron-LM d98e8a64 names the Megatron-Core fields; NeMo 8cfedd72 names NeMo's. The Megatron-LM
reader treats the same settings alike, with one text per setting: a NOTED key whose Megatron-LM
flag that reader notes takes its note (`megatron_unread.NOT_MODELLED`; the key's sense says when,
NeMo's value being True / False where the flag is a switch), and the reader's refusals
(--fp32-residual-connection, `megatron_unread.REFUSED`) are consulted by `nemo_keys.classify` for
a NeMo key of the same name. The others keep their own text: pipeline_dtype (no Megatron-LM
flag), attention_softmax_in_fp32 (the Megatron-LM reader prices it under its local attention:
`megatron_args_memory.softmax_fields`) and delay_wgrad_compute (its Megatron-LM flag goes with
--overlap-moe-expert-parallel-comm, whose all-to-all planner hides under the whole forward and
backward compute, `planner.model.ep_overlap`, and which planner writes beside it).
"""

from __future__ import annotations

from typing import Any

from planner.inputs.megatron_unread import NOT_MODELLED

SET, OFF, ANY = "set", "off", "any"
"""When a NOTED key's value gets its note: set true (a switch, or a number above 0), set false
(a switch on by default), or given at all (None aside)."""

BF16 = ("torch.bfloat16", "bfloat16", "bf16")

NOTED: dict[str, tuple[str, str]] = {
    "trainer.strategy.pipeline_dtype": (
        ANY,
        "the pipeline's sends and receives are then in that dtype; planner sizes and times "
        "them in the parameters' dtype (MegatronStrategy.pipeline_dtype, else the precision "
        "plugin's, megatron_strategy.py connect)",
    ),
    "trainer.plugins.pipeline_dtype": (
        ANY,
        "the pipeline's dtype where the strategy leaves its own unset (megatron_strategy.py "
        "connect); planner sizes and times the sends in the parameters' dtype",
    ),
    "trainer.strategy.ddp.align_param_gather": (ANY, NOT_MODELLED["--no-align-param-gather"]),
    "trainer.strategy.ddp.delay_wgrad_compute": (
        SET,
        "the delayed weight-gradient computation (distributed_data_parallel_config.py:185) is "
        "not read from NeMo overrides: timed without it",
    ),
    "model.config.delay_wgrad_compute": (
        SET,
        "the delayed weight-gradient computation (model_parallel_config.py:348) is not read "
        "from NeMo overrides: timed without it",
    ),
    "optim.config.overlap_param_gather_with_optimizer_step": (
        SET,
        NOT_MODELLED["--overlap-param-gather-with-optimizer-step"],
    ),
    "model.config.distribute_saved_activations": (
        SET,
        NOT_MODELLED["--distribute-saved-activations"],
    ),
    "model.config.fp16_lm_cross_entropy": (SET, NOT_MODELLED["--fp16-lm-cross-entropy"]),
    "model.config.moe_permute_fusion": (ANY, NOT_MODELLED["--moe-permute-fusion"]),
    "model.config.bias_dropout_fusion": (OFF, NOT_MODELLED["--no-bias-dropout-fusion"]),
    "model.config.attention_softmax_in_fp32": (
        ANY,
        "read only by an unfused attention (Transformer Engine's fused attention, which the "
        "Llama and Mixtral recipes build, ignores it); Gemma 2's unfused softmax is counted in "
        "its default dtype whatever this says",
    ),
}
"""Keys NeMo runs that change memory or time in ways planner does not price: a note naming the
key (`SET` / `OFF` / `ANY`: when)."""

_STRATEGY_FIELDS = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "microbatch_group_size_per_vp_stage",
    "context_parallel_size",
    "sequence_parallel",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "pipeline_dtype",
    "pipeline_model_parallel_comm_backend",
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
    "use_te_rng_tracker",
    "pipeline_model_parallel_layout",
)
OVERWRITTEN: dict[str, str] = {
    **{f"model.config.{f}": f"trainer.strategy.{f}" for f in _STRATEGY_FIELDS},
    "trainer.strategy.ddp.use_distributed_optimizer": "optim.config.use_distributed_optimizer",
}
"""model.config keys NeMo overwrites with the strategy's ParallelismConfig (the fields of
megatron_strategy.py ParallelismConfig that Megatron-Core's ModelParallelConfig /
TransformerConfig also have, copied onto the model's config in MegatronStrategy.connect,
_strategy_lib.py:166-171), and the DDP config's use_distributed_optimizer, which NeMo sets from
the optimizer's (megatron_strategy.py:472-474): the key -> the key that is read."""


def given(sense: str, value: Any) -> bool:
    """Whether a NOTED key's value asks for what its note is about."""
    if value is None:
        return False
    if sense == ANY:
        return True
    if sense == OFF:
        return value is False or value == 0
    return value is True or (not isinstance(value, bool) and isinstance(value, int) and value > 0)


def unread_note(key: str, value: Any) -> str | None:
    """The not-modelled note of a NOTED or OVERWRITTEN key (None: the value changes nothing)."""
    if key in OVERWRITTEN:
        return (
            f"{key}={value!r}: NeMo writes {OVERWRITTEN[key]} over it before the model is "
            "built: read that"
        )
    sense, note = NOTED[key]
    if key.endswith("pipeline_dtype") and str(value) in BF16:
        return None
    return f"{key}={value!r}: {note}" if given(sense, value) else None


_MLA = (
    "MLATransformerConfig's (transformer_config.py:3278 @d98e8a64), which no recipe planner reads "
    "builds: their configs are GPTConfig's (LlamaConfig, MixtralConfig, Gemma2Config)"
)
NOT_FIELDS: dict[str, str] = {
    "activation": (
        "TransformerConfig's activation is activation_func (transformer_config.py:224 "
        "@d98e8a64), a callable the recipe config sets"
    ),
    "untie_embeddings_and_output_weights": (
        "GPTConfig's is share_embeddings_and_output_weights, its opposite (NeMo GPT model "
        "base.py:294)"
    ),
    "hybrid_layer_pattern": (
        "a hybrid (Mamba) model's layer pattern, which no recipe planner reads builds"
    ),
    **dict.fromkeys(("q_lora_rank", "kv_lora_rank", "qk_head_dim"), _MLA),
    **dict.fromkeys(("qk_pos_emb_head_dim", "v_head_dim"), _MLA),
}
"""planner's model fields (`ModelArch`) that are no field of the model configs NeMo's recipes
here build, GPTConfig (NeMo 8cfedd72, its GPT model base.py) over Megatron-Core's TransformerConfig
and ModelParallelConfig (d98e8a64): a `model.config.<name>` key NeMo-Run refuses ("No parameter
named ...") -> what the config has instead. (max_position_embeddings: `nemo_args._positions`.)"""
