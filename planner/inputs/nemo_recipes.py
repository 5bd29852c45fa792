"""NeMo 2.0 pre-training recipes (`nemo llm pretrain --factory NAME`) that planner can read: the
zoo model of the same shape and what the recipe sets where a command line says nothing.

Every figure is NeMo's (NVIDIA/NeMo 8cfedd72, September 2025): the parallel degrees and data sizes
are the defaults of `nemo/collections/llm/recipes/<factory>.py` (`trainer()` / `pretrain_recipe()`;
gemma2_2b's in `pretrain_recipe()` itself, its strategy in `recipes/gemma2.py`), the shapes those
of the model config the recipe builds (`nemo/collections/llm/gpt/model/llama.py`, `mixtral.py`,
`gemma2.py`), compared field by field with the zoo file named here (num_layers, hidden_size,
ffn_hidden_size, heads, query groups, head size, gating, norm, bias, tied embeddings, experts).
What every recipe listed here shares: the bf16-mixed precision plugin, Megatron's distributed
optimizer (`recipes/optim/adam.py` distributed_fused_adam_with_cosine_annealing:
use_distributed_optimizer=True), fp32 gradient reduction with overlap_grad_reduce and
overlap_param_gather (the strategy's DistributedDataParallelConfig), 8 GPUs per node, and
`MockDataModule` data, whose default tokenizer is Megatron's GPT-2 BPE (`gpt/data/mock.py`).

The vocabulary: Llama and Mixtral configs leave vocab_size unset, so the model takes the
tokenizer's size padded to make_vocab_size_divisible_by (128) x tp (`gpt/model/base.py`
GPTConfig.configure_model, `nemo/lightning/base.py` get_vocab_size); Gemma2Config sets
vocab_size = 256,000, which is used as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

NEMO_SOURCE = "NVIDIA/NeMo 8cfedd72"
GPUS_PER_NODE = 8
"""`num_gpus_per_node` (trainer.devices) of every recipe here."""


@dataclass(frozen=True)
class Recipe:
    """One `--factory` pre-training recipe."""

    factory: str
    zoo: str
    """planner's zoo model of the same shape."""
    config: str
    """The NeMo model config class the recipe builds."""
    tp: int
    pp: int
    vpp: int | None
    cp: int
    sp: bool
    seq_length: int
    global_batch_size: int
    micro_batch_size: int
    ep: int = 1
    num_nodes: int = 1
    vocab_in_config: bool = False
    """The config sets vocab_size (used unpadded); otherwise the tokenizer's size, padded."""
    fused_glu: bool = True
    """bias_activation_fusion with F.silu: Megatron's fused SwiGLU keeps only its input."""
    flash_attention: bool = True
    derived: tuple[str, ...] = ("kv_channels",)
    """Fields the zoo file states but the NeMo config leaves to Megatron's default (hidden /
    heads; the expert width = ffn_hidden_size): they follow the line's shape overrides."""
    not_modelled: tuple[str, ...] = ()
    accounted: bool = False
    """The strategy counts the embedding and the loss as pipeline layers
    (account_for_embedding_in_pipeline_split / _loss_; llama31_405b.py sets both)."""
    config_seq_length: int = 4096
    """The model config's seq_length, which NeMo builds the model with
    (`max_sequence_length=self.seq_length`, NeMo GPT model base.py:399): a learned position
    table holds that many positions whatever data.seq_length is (Megatron-Core gpt_model.py:177,
    language_model_embedding.py:72 @d98e8a64)."""
    grad_accum_fusion: bool = True
    """GPTConfig.gradient_accumulation_fusion (NeMo GPT model base.py:304: on where APEX's
    fused kernel imports, :47-51, as in NeMo's containers); off, DDP's hook adds each weight
    gradient into the main gradient (`planner.model.wgrad_accumulation`)."""
    dropout: bool = False
    """The config's attention and hidden dropout are above 0 (GPTConfig keeps TransformerConfig's
    0.1). Every config planner reads sets both to 0.0, so its recipes keep no dropout masks:
    LlamaConfig (`gpt/model/llama.py`), MixtralConfig (`gpt/model/mixtral.py`), Gemma2Config
    (`gpt/model/gemma2.py`)."""


_GEMMA2_2B = Recipe(
    "gemma2_2b",
    "gemma2-2b",
    "Gemma2Config2B",
    tp=2,
    pp=1,
    vpp=None,
    cp=1,
    sp=False,
    seq_length=4096,
    global_batch_size=32,
    micro_batch_size=2,
    vocab_in_config=True,
    config_seq_length=8192,  # Gemma2Config.seq_length (gemma2.py:104; Gemma2Config2B keeps it)
    grad_accum_fusion=False,  # Gemma2Config.gradient_accumulation_fusion (gemma2.py:114)
    # Gemma2Config: activation openai_gelu (NeMo's own), bias_activation_fusion left at
    # TransformerConfig's False, so the GLU runs eagerly and saves gelu(x) too
    fused_glu=False,
    # gemma2_layer_spec: core_attention=Gemma2DotProductAttention, "unfused SDPA for attn logit
    # softcapping": the s x s probabilities are stored as in MCore's local attention
    flash_attention=False,
    derived=(),  # Gemma2Config sets kv_channels = 256
    not_modelled=(
        "Gemma 2's attention logit soft-capping keeps a second s x s score tensor per head for "
        "its backward, and its post-attention and post-MLP RMSNorms keep two more inputs per "
        "layer: not counted (memory under-estimated)",
        # gemma2.py:617-623, :643-648 (NeMo 8cfedd72): scale * tanh(logits / scale), whose
        # tanh keeps its output for the backward
        "Gemma 2's final-logit soft-capping keeps a tanh output the size of the logits for its "
        "backward on the last stage (seq_length x micro_batch_size x vocabulary / tp x 2 bytes: "
        "1.95 GiB at the recipe's 4096 x 2 x 256,000 / 2): not counted (memory under-estimated)",
    ),
)

# Llama and Mixtral configs: bias_activation_fusion=True with F.silu, gated (fused SwiGLU); Mixtral
# routes with the alltoall dispatcher, planner's default.
_ROWS: tuple[tuple[str, str, str, int, int, int | None, int, bool, int, int, int], ...] = (
    # factory, zoo model, NeMo config, tp, pp, vpp, cp, sp, ep, num_nodes, seq_length
    ("llama3_8b", "llama3.1-8b", "Llama3Config8B", 1, 1, None, 2, False, 1, 1, 8192),
    ("llama31_8b", "llama3.1-8b", "Llama31Config8B", 1, 1, None, 2, False, 1, 1, 8192),
    ("llama3_70b", "llama3.1-70b", "Llama3Config70B", 4, 4, 5, 2, True, 1, 1, 8192),
    ("llama31_70b", "llama3.1-70b", "Llama31Config70B", 4, 4, 5, 2, True, 1, 1, 8192),
    ("llama31_405b", "llama3.1-405b", "Llama31Config405B", 8, 8, 2, 4, True, 1, 1, 8192),
    ("llama2_7b", "llama2-7b", "Llama2Config7B", 2, 1, None, 1, False, 1, 1, 4096),
    ("mixtral_8x7b", "mixtral-8x7b", "MixtralConfig8x7B", 1, 4, 8, 1, False, 8, 8, 4096),
    ("mixtral_8x22b", "mixtral-8x22b", "MixtralConfig8x22B", 2, 4, 14, 2, True, 8, 16, 4096),
)
"""Their data: MockDataModule(seq_length, global_batch_size=512, micro_batch_size=1)."""

RECIPES: dict[str, Recipe] = {
    _GEMMA2_2B.factory: _GEMMA2_2B,
    **{
        row[0]: Recipe(
            *row[:3],
            tp=row[3],
            pp=row[4],
            vpp=row[5],
            cp=row[6],
            sp=row[7],
            ep=row[8],
            num_nodes=row[9],
            seq_length=row[10],
            # each config's seq_length is its data's: Llama3Config8B / 70B 8192 (llama.py:207,
            # :223), the llama31_* recipes set 8192 over Llama31Config's 131,072
            # (llama31_8b.py:61, llama31_70b.py:61, llama31_405b.py:61), LlamaConfig 4096
            # (llama.py:72; Llama2Config7B keeps it), MixtralConfig8x7B / 8x22B 4096
            # (mixtral.py:107, :122)
            config_seq_length=row[10],
            global_batch_size=512,
            micro_batch_size=1,
            # MixtralConfig leaves moe_ffn_hidden_size unset (= ffn_hidden_size)
            derived=("kv_channels", "moe_ffn_hidden_size") if row[8] > 1 else ("kv_channels",),
            accounted=row[0] == "llama31_405b",  # its trainer() sets both (Recipe.accounted)
        )
        for row in _ROWS
    },
}
"""The factories planner reads, by name."""
