"""torchtitan as the training code: the plan's `[torchtitan]` table and the defaults
`[training] framework = "torchtitan"` gives the separate training-code knobs.

Facts from pytorch/torchtitan at e347b1e5e6b6941d789d16d340145294d82dc71e (the last commit with
torchtitan/config/job_config.py, the TOML job config train.py reads; later commits replace it by
a Python config registry):
- job_config.py `Parallelism`: data_parallel_replicate_degree x data_parallel_shard_degree x
  context_parallel_degree x tensor_parallel_degree x pipeline_parallel_degree = world
  (distributed/parallel_dims.py `_validate`); fsdp_reshard_after_forward "default" | "always" |
  "never"; enable_async_tensor_parallel ("currently only effective when compile is enabled");
  pipeline_parallel_schedule a torch.distributed.pipelining schedule name;
  expert_tensor_parallel_degree 1 (its default, :464; a plan without etp reads so wherever EP is
  on) or tp (parallel_dims.py asserts); expert_parallel_comm_backend
  "standard" | "deepep".
- `ActivationCheckpoint.mode` "selective" | "full" | "memory_budget" | "none";
  selective_ac_option "op" (per-op SAC) or an integer N: every N-th layer checkpointed whole
  (distributed/activation_checkpoint.py `_apply_layer_sac`, a counter over the rank's layers).
- `Float8Linear.recipe_name` "tensorwise" | "rowwise" | "rowwise_with_gw_hp" with
  enable_fsdp_float8_all_gather (the FSDP all-gather in float8, tensorwise only: TP float8 too
  only for tensorwise, models/llama3/infra/parallelize.py).
- `Training.mixed_precision_reduce` only "float32"; `Training.dtype` float32: the FSDP-sharded
  parameter is the fp32 master (no separate copy).
- The default training code: torch cross entropy on the vocab-sharded logits (loss_parallel),
  DTensor sequence parallelism (the all-gathered input of the column-parallel linears is what
  autograd saves), eager RMSNorm and SwiGLU (fused by inductor only under torch.compile),
  PyTorch SDPA flash attention. run_train.sh sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.inputs import catalog
from planner.inputs.arch import ModelArch
from planner.inputs.arch_fields import MAX_LAYERS
from planner.inputs.errors import InputError, spelled
from planner.inputs.fields import Flag, NonNegativeFloat, NonNegativeInt, PositiveInt
from planner.inputs.plan_counts import Batch, BatchCount, Degree, Tokens

TORCHTITAN_COMMIT = "e347b1e5e6b6941d789d16d340145294d82dc71e"
"""pytorch/torchtitan commit whose torchtitan/config/job_config.py the emitted TOML follows."""
TOML_REMOVED = "torchtitan 9810191b (2026-02-23, PR #2386) and later"
"""The torchtitan that reads no TOML job config: its runs take a Python config function
(`-m torchtitan.train --module M --config F`; benchmarks/data/torchtitan_head_config.md)."""

Framework = Literal["megatron", "torchtitan"]
Reshard = Literal["default", "always", "never"]
Schedule = Literal[
    "1F1B", "GPipe", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble",
    "DualPipeV",
]  # fmt: skip
"""torch.distributed.pipelining schedule names (schedules.py `get_schedule_class`) torchtitan
accepts in pipeline_parallel_schedule."""

SINGLE_STAGE: frozenset[str] = frozenset({"1F1B", "GPipe"})
"""PipelineScheduleSingle subclasses: exactly one stage per rank (torchtitan
pipeline_parallel.py raises otherwise)."""
V_SHAPED: frozenset[str] = frozenset({"ZBVZeroBubble", "DualPipeV"})
"""V schedules: exactly two stages per rank."""
Float8Recipe = Literal["tensorwise", "rowwise", "rowwise_with_gw_hp"]

MODELS: dict[str, tuple[str, str]] = {
    "llama3.1-8b": ("llama3", "8B"),
    "llama3.1-70b": ("llama3", "70B"),
    "llama3.1-405b": ("llama3", "405B"),
    "deepseek-v2-lite": ("deepseek_v3", "16B"),
    "deepseek-v3": ("deepseek_v3", "671B"),
    "qwen3-30b-a3b": ("qwen3", "30B-A3B"),
    "qwen3-235b-a22b": ("qwen3", "235B-A22B"),
    "gpt-oss-20b": ("gpt_oss", "20b"),
    "gpt-oss-120b": ("gpt_oss", "120b"),
    "llama4-17bx16e-titan": ("llama4", "17bx16e"),
    "llama4-17bx128e-titan": ("llama4", "17bx128e"),
}
"""planner zoo name -> torchtitan (model.name, model.flavor): the flavors torchtitan defines
(torchtitan/models/<name>/__init__.py at TORCHTITAN_COMMIT) with the same shape. Llama 4's
(models/llama4/__init__.py:38-60) are not HF Scout / Maverick (no RoPE-less layers, no q/k norm):
their own zoo entries; models/llama4 is gone from the Python configurations' torchtitan
(deprecated in d92336fe, before b5bcd76c), so only the TOML target writes them
(`planner.emit.torchtitan_module.BASELINES` has none). DeepSeek-V3's "16B" (e347b1e5
models/deepseek_v3/__init__.py:78-102, b5bcd76c :389-456) is DeepSeek-V2-Lite's shape: 27 layers
of dim 2048, the first dense (10944), 16 MLA heads (q_lora_rank 0, kv_lora_rank 512, qk 128 +
rope 64, v 128), 64 routed experts of 1408, top 6, softmax without route norm, 2 shared (one FFN
of 2 x 1408), vocabulary 102400, the output untied; like every torchtitan MoE flavor
(load_balance_coeff 1e-3: e347b1e5 torchtitan models moe moe.py:38, b5bcd76c models/common
moe.py:362) it keeps a per-expert bias that the zoo's V2-Lite, like its Qwen3 entries, leaves
out (one fp32 value per expert, not a shape field that is read)."""

NOT_SHAPE = frozenset(
    {
        "name",
        "display_name",
        "source",
        "make_vocab_size_divisible_by",
        "mtp_num_layers",
        "mtp_use_repeated_layer",
    }
)
"""ModelArch fields no torchtitan flavor has: the model's names and where its figures come from,
Megatron's vocabulary padding (torchtitan sizes the embedding and the output at the flavor's
vocab_size, unpadded), and the multi-token prediction layers, which torchtitan builds only when
asked (`TorchtitanSection.num_mtp_layers`, `planner.inputs.plan.trained_by`)."""


def _shape(arch: ModelArch) -> dict[str, Any]:
    return arch.model_dump(exclude=set(NOT_SHAPE))


def _value(value: Any) -> str:
    return "unset" if value is None else spelled(value)


@lru_cache(maxsize=64)  # the search rules ask it of each layout of one model
def zoo_flavor(arch: ModelArch) -> str | None:
    """The `MODELS` key (a zoo name) of the flavor torchtitan runs for `arch`: the zoo entry every
    field of which but `NOT_SHAPE`'s equals `arch`'s (as `plan_writer.model_table` compares a plan's
    model with the zoo's, its name aside), else None. The flavor is chosen by what the model is,
    never by what it is called: a config.json named after a flavor with another shape has none,
    one of a flavor's shape under another name has it."""
    shape = _shape(arch)
    return next((name for name in MODELS if _shape(catalog.get_model(name)) == shape), None)


def flavor_name(arch: ModelArch) -> str:
    """The zoo name of the torchtitan flavor `arch` is (`zoo_flavor`: by its shape), else its own
    name: a port of a flavor's family under that family's name (a config.json of other sizes) is
    planned as torchtitan runs that family, which `launch` then refuses by field."""
    return zoo_flavor(arch) or arch.name


def no_flavor(arch: ModelArch, limit: int = 4) -> str:
    """Why `zoo_flavor` finds none: the flavor whose model differs from `arch` in the fewest
    fields, and those fields (the first `limit`) with both values."""
    shape = _shape(arch)
    nearest: tuple[str, list[str], dict[str, Any]] | None = None
    for name in MODELS:
        other = _shape(catalog.get_model(name))
        differ = [k for k in shape if shape[k] != other[k]]
        if nearest is None or len(differ) < len(nearest[1]):
            nearest = (name, differ, other)
    assert nearest is not None
    name, differ, other = nearest
    model, flavor = MODELS[name]
    shown = ", ".join(f"{k} {_value(shape[k])} (its {_value(other[k])})" for k in differ[:limit])
    left = len(differ) - limit
    more = f" and {left} more field{'s' if left > 1 else ''}" if left > 0 else ""
    return f"the nearest, {model} {flavor} (planner's {name}), differs in {shown}{more}"


HEAD_GONE = {"llama4": "whose models/llama4 torchtitan deleted in d92336fe, before b5bcd76c"}
"""torchtitan models of a TOML flavor (`MODELS`) that its Python configurations (b5bcd76c) no
longer have, and why: only the TOML target writes them."""

HEAD_CONTEXT: dict[str, int] = {
    "llama3.1-8b": 131_072,
    "llama3.1-70b": 131_072,
    "llama3.1-405b": 131_072,
    "deepseek-v2-lite": 16_384,  # DeepSeek-V3 16B's (b5bcd76c deepseek_v3/__init__.py:428)
    "deepseek-v3": 16_384,
    "qwen3-30b-a3b": 40_960,
    "qwen3-235b-a22b": 40_960,
    "gpt-oss-20b": 131_072,
    "gpt-oss-120b": 131_072,
}
"""planner zoo name -> the RoPE table of the flavor torchtitan's Python configurations start it
from (the config_registry baselines of `planner.emit.torchtitan_module`): they refuse a longer
max_context_length."""

MOE_MODELS: frozenset[str] = frozenset({"deepseek_v3", "qwen3", "gpt_oss", "llama4"})
"""torchtitan models with MoE layers (torchtitan/models/moe), the only ones it runs EP for."""

MTP_FAMILY = "deepseek_v3"
"""The one torchtitan model whose model_registry takes num_mtp_layers (b5bcd76c
models/deepseek_v3/__init__.py:616-628; the others' raise TypeError on it,
`torchtitan_refusals.MODEL_REGISTRY`): its MTPDecoder (mtp.py:164-275) raises under pipeline
and context parallelism (mtp.py:196-206) and with the chunked loss (mtp.py:268-272)."""


def mtp_family(arch: ModelArch) -> str | None:
    """The torchtitan model `arch`'s flavor belongs to where it is not MTP_FAMILY (it takes no
    num_mtp_layers), else None (DeepSeek-V3's flavor, or a model of no flavor: planned as
    torchtitan runs it, its launch refused by field)."""
    name = MODELS.get(flavor_name(arch), (MTP_FAMILY, ""))[0]
    return None if name == MTP_FAMILY else name


DEEPEP_MODELS = ("deepseek_v3", "llama4")
"""The torchtitan models whose parallelize reads `expert_parallel_comm_backend` at
TORCHTITAN_COMMIT (models/deepseek_v3/infra/parallelize.py, models/llama4/infra/parallelize.py;
qwen3's and gpt_oss's build the plain ExpertParallel): DeepEP for the others is torchtitan's
Python configurations' (b5bcd76c, whose dispatchers every MoE model takes)."""


FLOAT8_EXPERTS = (
    "torchtitan converts the MoE's routed experts (GroupedExperts, grouped GEMMs, not "
    "nn.Linear: the float8 linear converter leaves them in bf16) only through its separate "
    "grouped-GEMM converter, which no baseline turns on: at e347b1e5 `quantize.grouped_mm.float8` "
    "in model.converters with [quantize.grouped_mm.float8] fqns = ['experts'] (components/"
    "quantization/float8.py:176-239, job_config.py:756-763, default fqns []), at b5bcd76c "
    "Float8GroupedExpertsConverter.Config() in model_registry's converters (float8.py:216-266; "
    "deepseek_v3/config_registry.py:248-269 deepseek_v3_671b_float8). Either way torchao's "
    "dynamic rowwise scaling for the forward and both gradients, whatever the linear recipe "
    "(pytorch/ao torchao/prototype/moe_training: Float8TrainingOpConfig's one recipe, "
    "FP8_ROWWISE; _Float8GroupedMM at 01374eb5 scaled_grouped_mm.py runs the forward, grad_A "
    "and grad_B as rowwise-scaled float8 grouped GEMMs)"
)
"""How torchtitan runs the routed experts in float8 (`TorchtitanSection.float8_experts`)."""

FLOAT8_EXPERTS_RECIPE = "rowwise"
"""The scaling of torchtitan's float8 experts (`FLOAT8_EXPERTS`): rowwise, at every linear
recipe."""

COMPILE_LOSS_KEY = "planner_loss"
"""The compile table's key that carries whether the loss is compiled, inductor's fusion (a
TOML's `torchtitan_config._read`, a Python configuration's `torchtitan_tables`), to
`torchtitan_config._document` ([torchtitan] compile_loss): no torchtitan field, so no file
sets it (`torchtitan_toml.check_fields` refuses it)."""

ROUTER_GATE = "router.gate"
"""The MoE router's gate (`layers.<i>.moe.router.gate`, an nn.Linear at e347b1e5 models/moe/
moe.py:224, a Linear.Config at b5bcd76c models/common/moe.py:195): the float8 linear converter
converts it unless a filter_fqns entry matches, and torchtitan's own MoE float8 configurations
filter it (e347b1e5 deepseek_v3_671b.toml:74, llama4_17bx16e.toml:67; b5bcd76c
deepseek_v3/config_registry.py:262). planner times it in bf16 (`planner.model.moe_time.
router_time`), so the launch targets filter it too."""


class TorchtitanSection(BaseModel):
    """`[torchtitan]`: torchtitan's own settings (only with `[training] framework =
    "torchtitan"`). The degrees are `[parallel]`'s; dp = dp_replicate x the FSDP shard degree."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reshard_after_forward: Reshard = Field(
        default="default",
        description="FSDP2 reshard_after_forward policy: default (reshard unless pipelining), "
        "always, never",
    )
    dp_replicate: Degree = Field(
        default=1, description="HSDP replicas (data_parallel_replicate_degree); 1 = plain FSDP"
    )
    async_tp: Flag = Field(
        default=False,
        description="enable_async_tensor_parallel (needs compile; at tp 1 torchtitan ignores it)",
    )
    compile: Flag = Field(default=False, description="torch.compile each transformer block")
    compile_loss: Flag = Field(
        default=False,
        description='torch.compile the loss ("loss" in compile.components, inductor: e347b1e5 '
        "components/loss.py:33-35, b5bcd76c loss.py:245-252, :557), alone or with compile; "
        "its memory: loss_activations.COMPILED_PYTORCH_LOSS_BYTES_PER_LOGIT",
    )
    pipeline_schedule: Schedule | None = Field(
        default=None,
        description="pipeline_parallel_schedule (vpp must fit it); None = 1F1B at vpp 1, "
        "Interleaved1F1B above",
    )
    selective_layer_every: PositiveInt | None = Field(
        default=None,
        description="activation checkpoint selective_ac_option = N: every N-th layer "
        "recomputed whole (needs parallel.recompute = 'full')",
    )
    float8_all_gather: Flag = Field(
        default=False,
        description="enable_fsdp_float8_all_gather (precision fp8, fp8_recipe tensorwise)",
    )
    float8_experts: Flag = Field(
        default=False,
        description="the MoE's routed experts in float8 too (precision fp8): torchtitan's "
        "grouped-GEMM float8 converter, off by default (`FLOAT8_EXPERTS`); off, the experts "
        "run in bf16 beside the float8 linear layers",
    )
    deterministic_fill: Flag = Field(
        default=False,
        description="with training.deterministic: torch.utils.deterministic."
        "fill_uninitialized_memory left on, so every empty tensor is NaN-filled, as torchtitan "
        "e347b1e5 runs debug.deterministic (distributed/utils.py:114-124; a TOML is read so); "
        "false: b5bcd76c's, which turns it off (distributed/utils.py:201-206). "
        "planner.model.determinism",
    )
    validation_batch: BatchCount = Field(
        default=0,
        description="[validation] enable: its local_batch_size (e347b1e5 job_config.py:960, "
        "default 8), run after a step beside the states (planner.model.titan_validation); 0: "
        "no validation",
    )
    validation_seq_len: Tokens = Field(
        default=2048, description="[validation] seq_len (job_config.py:963, default 2048)"
    )
    cp_load_balance: Flag = Field(
        default=True, description="context_parallel_load_balancer headtail (false: None)"
    )
    loss_chunks: Tokens = Field(
        default=1,
        description="the loss over this many chunks of a micro-batch's tokens (torchtitan's "
        "ChunkedLossWrapper num_chunks: 8 in every baseline since it came, the Python "
        "configurations' torchtitan); 1 = the whole logits at once (CrossEntropyLoss, e347b1e5)",
    )

    num_mtp_layers: NonNegativeInt = Field(
        default=0,
        le=MAX_LAYERS,
        description="DeepSeek-V3's multi-token prediction depths: model_registry(..., "
        "num_mtp_layers=N) (b5bcd76c models/deepseek_v3/__init__.py:616-628; 0, its default, "
        "builds none); each an MTPTransformerBlock of the last decoder layer's kind (mtp.py:"
        "106-161), trained with MTPLoss at pp 1, cp 1 and the whole logits (`MTP_FAMILY`)",
    )
    mtp_scale: NonNegativeFloat = Field(
        default=0.3,
        description="MTPLoss.Config(mtp_scale=...), the MTP losses' weight (b5bcd76c "
        "models/deepseek_v3/mtp.py:324-326; no bearing on memory or time)",
    )
    gradient_accumulation_steps: Batch = Field(
        default=1,
        description="with pipelining, the pipeline schedules a step runs, k: torchtitan's "
        "gradient_accumulation_steps, global_batch_size / (local_batch_size x dp) (e347b1e5 "
        "train.py:195-215; b5bcd76c trainer.py:409-428), each one pp_schedule.step of "
        "local_batch_size / pipeline_parallel_microbatch_size micro-batches (e347b1e5 "
        "train.py:502-511, :561; b5bcd76c trainer.py:827, :856-899), the optimizer once a "
        "step; the step's micro-batches, global_batch_size / (dp x micro_batch_size), split into "
        "k schedules of as many each (`planner.model.titan_accumulation`). 1 = one schedule "
        "of them all; without pipelining planner's micro-batches are torchtitan's accumulation "
        "steps already, so k > 1 needs pp > 1",
    )

    def schedule(self, vpp: int) -> str:
        """The pipeline schedule torchtitan runs at `vpp` stages per rank."""
        if self.pipeline_schedule is not None:
            return self.pipeline_schedule
        return default_schedule(vpp)


REDUCE_DTYPE = "float32"
"""The one value torchtitan takes for training.mixed_precision_reduce, FSDP's gradient reduce dtype
(`Literal["float32"]`: job_config.py:290 at e347b1e5, configs.py:102 at b5bcd76c), and the one
planner models."""


def check_reduce_dtype(value: object, where: str, field: str) -> None:
    """Refuses a mixed_precision_reduce other than REDUCE_DTYPE (None: unset, the default);
    `field` as the file spells it (a TOML's `training.`, a Python module's
    `config.training.`)."""
    if value is not None and value != REDUCE_DTYPE:
        raise InputError(
            f"{where}: {field}: {spelled(value)}: torchtitan takes only {REDUCE_DTYPE!r} "
            "(Literal['float32'], job_config.py:290 at e347b1e5, configs.py:102 at b5bcd76c), "
            "which planner models"
        )


def default_schedule(vpp: int) -> str:
    """The schedule a plan that names none runs: 1F1B, or Interleaved1F1B with vpp > 1."""
    return "1F1B" if vpp == 1 else "Interleaved1F1B"


def training_defaults(framework: Framework, compile_on: bool) -> dict[str, object]:
    """The `[training]` training-code knobs a framework sets when the plan leaves them out."""
    if framework == "megatron":
        return {
            "fused_norm": True,
            "fused_swiglu": True,
            "fused_rope": True,
            "cross_entropy": "fused",
            "selective_recompute": "core_attn",
            "sp_keeps_gathered_input": False,
            "tp_backward_overlap": True,
            "expandable_segments": False,
            "fp8_param_gather": True,
            "fp4_param_gather": True,
            "fp8_recipe": "delayed",
        }
    return {
        "fused_norm": compile_on,
        "fused_swiglu": compile_on,
        "fused_rope": compile_on,
        "cross_entropy": "pytorch",
        "selective_recompute": "per_op",
        "sp_keeps_gathered_input": True,
        "tp_backward_overlap": False,
        "expandable_segments": True,
        "fp8_param_gather": False,
        "fp4_param_gather": False,
        "fp8_recipe": "tensorwise",
    }
