"""torchtitan configurations read as torchtitan runs them (planner.inputs.torchtitan_refusals):
the compile backend, float8's FSDP all-gather at shard degree 1, bf16 AdamW moments, DeepSeek's
MTP layers, and what torchtitan raises on that planner used to read past.

Oracles: pytorch/torchtitan source lines, cited per case (b5bcd76c for Python configurations,
e347b1e5 for TOML job configs), and hand arithmetic in the comments."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.inputs import torchtitan_config
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan

HEAD = (
    "from torchtitan.config import CompileConfig, ParallelismConfig\n"
    "from torchtitan.components.quantization.float8 import Float8LinearConverter\n"
    "from torchtitan.models.{model} import model_registry\n"
    "from torchtitan.models.{model}.config_registry import {base}\n\n\n"
    "def job():\n"
    "    config = {base}()\n"
)


def _module(
    tmp_path: Path,
    body: str,
    model: str = "llama3",
    base: str = "llama3_8b",
    gpus: int = 8,
    gpu: str = "h100-sxm-80gb",
) -> Plan:
    path = tmp_path / "job.py"
    path.write_text(HEAD.format(model=model, base=base) + body + "    return config\n")
    return torchtitan_config.load(path, gpu, gpus)


def _toml(tmp_path: Path, text: str, gpus: int = 8) -> Plan:
    path = tmp_path / "job.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n' + text)
    return torchtitan_config.load(path, "h100-sxm-80gb", gpus)


VARLEN = "    config.model_spec = model_registry('8B', attn_backend='varlen')\n"


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_backend_that_fuses_nothing_reads_as_compile_off(tmp_path: Path, backend: str) -> None:
    """b5bcd76c distributed/compile.py:66-70 passes compile.backend to torch.compile; eager and
    aot_eager generate no kernels, so nothing is fused (the plan's compile off) and async TP,
    inductor's _micro_pipeline_tp pass (compile.py:95), does not run."""
    body = VARLEN + (
        "    config.parallelism.tensor_parallel_degree = 2\n"
        f"    config.compile = CompileConfig(enable=True, backend={backend!r},"
        " enable_async_tensor_parallel=True)\n"
    )
    plan = _module(tmp_path, body)
    assert not plan.job.titan.compile and not plan.job.titan.async_tp
    assert not plan.job.fused_norm and not plan.job.fused_swiglu
    assert any(field == "config.compile.backend" for field, _ in plan.inert)
    inductor = _module(tmp_path, body.replace(f"backend={backend!r}", "backend='inductor'"))
    assert inductor.job.titan.compile and inductor.job.fused_norm and not inductor.inert


def test_other_backends_and_eager_flex_are_refused(tmp_path: Path) -> None:
    """FlexAttention (llama3's default attn_backend, llama3/__init__.py:371) under a backend but
    inductor and aot_eager raises (compile.py:114-125); an unknown backend's fusion is unknown."""
    with pytest.raises(InputError, match=r"compile\.backend: \"eager\" with FlexAttention"):
        _module(tmp_path, "    config.compile = CompileConfig(enable=True, backend='eager')\n")
    body = VARLEN + "    config.compile = CompileConfig(enable=True, backend='cudagraphs')\n"
    with pytest.raises(InputError, match=r"compile\.backend: \"cudagraphs\": planner models"):
        _module(tmp_path, body)


def test_a_toml_backend(tmp_path: Path) -> None:
    """e347b1e5 models/llama3/infra/parallelize.py:262-264 compiles each block with it."""
    plan = _toml(tmp_path, '[compile]\nenable = true\nbackend = "aot_eager"\n')
    assert not plan.job.titan.compile and plan.inert[0][0] == "compile.backend"


FLOAT8 = """converters = ["quantize.linear.float8"]
[quantize.linear.float8]
enable_fsdp_float8_all_gather = true
filter_fqns = ["output"]
[parallelism]
data_parallel_shard_degree = {shard}
context_parallel_degree = 2
[activation_checkpoint]
mode = "full"
"""


def test_float8_all_gather_is_off_at_shard_degree_1(tmp_path: Path) -> None:
    """e347b1e5 components/quantization/float8.py:87-90: enable_fsdp_float8_all_gather =
    parallel_dims.dp_shard_enabled and the flag; dp_shard_enabled is dp_shard > 1
    (parallel_dims.py:322-323), whatever cp shards FSDP over."""
    plan = _toml(tmp_path, FLOAT8.format(shard=1), gpus=2)
    assert not plan.job.titan.float8_all_gather
    assert plan.inert[0][0] == "quantize.linear.float8.enable_fsdp_float8_all_gather"
    assert _toml(tmp_path, FLOAT8.format(shard=2), gpus=4).job.titan.float8_all_gather


def test_bf16_adam_moments(tmp_path: Path) -> None:
    """b5bcd76c components/optimizer/optimizer.py:109-123, :332-371: "fused_opt_states_bf16"
    creates exp_avg and exp_avg_sq in bf16: 2 + 2 bytes a parameter, not 4 + 4."""
    plan = _module(tmp_path, "    config.optimizer.implementation = 'fused_opt_states_bf16'\n")
    assert plan.job.optimizer_state_dtype == "bf16"
    assert _module(tmp_path, "").job.optimizer_state_dtype == "fp32"
    with pytest.raises(InputError, match=r"implementation: \"fast\": torchtitan takes"):
        _module(tmp_path, "    config.optimizer.implementation = 'fast'\n")


DEEPSEEK = {"model": "deepseek_v3", "base": "deepseek_v3_671b", "gpus": 512}
DS_PAR = "    config.parallelism = ParallelismConfig(expert_parallel_degree=64{more})\n"
DS_MTP = "    config.model_spec = model_registry('671B', num_mtp_layers=1)\n"
DS_TOKENS = "    config.training.num_tokens_per_microbatch_per_dp_rank = 4096\n"


DS_LOSS = "    config.loss = MTPLoss.Config(mtp_scale=0.5)\n"
DS_LOSS_IMPORT = "from torchtitan.models.deepseek_v3.mtp import MTPLoss\n"


@pytest.mark.parametrize(
    ("more", "match"),
    [
        (", pipeline_parallel_degree=2", r"MTP does not support pipeline parallelism"),
        (", context_parallel_degree=2", r"MTP does not support context parallelism"),
    ],
)
def test_mtp_layers_are_refused_with_pp_or_cp(tmp_path: Path, more: str, match: str) -> None:
    """b5bcd76c models/deepseek_v3/mtp.py:196-206 raises with PP or CP."""
    body = DS_MTP + DS_PAR.format(more=more) + DS_TOKENS + DS_LOSS
    with pytest.raises(InputError, match=match):
        _module(tmp_path, body, **DEEPSEEK)  # type: ignore[arg-type]


def test_mtp_layers_are_read(tmp_path: Path) -> None:
    """b5bcd76c models/deepseek_v3/__init__.py:616-628 builds num_mtp_layers MTP blocks
    (:291-316), trained with MTPLoss (config_registry.py:76-82; mtp_scale, mtp.py:326): the plan's
    model holds them and the loss weight is kept."""
    body = DS_MTP + DS_PAR.format(more="") + DS_TOKENS + DS_LOSS
    path = tmp_path / "job.py"
    text = HEAD.format(model="deepseek_v3", base="deepseek_v3_671b")
    path.write_text(DS_LOSS_IMPORT + text + body + "    return config\n")
    plan = torchtitan_config.load(path, "h100-sxm-80gb", 512)
    assert plan.job.titan.num_mtp_layers == 1 and plan.job.arch.mtp_num_layers == 1
    assert plan.job.titan.mtp_scale == 0.5 and plan.job.titan.loss_chunks == 1


@pytest.mark.parametrize(
    ("loss", "mtp", "match"),
    [
        ("", DS_MTP, r"ChunkedLossWrapper with num_mtp_layers 1: torchtitan raises 'skip_lm_he"),
        (
            "    config.loss = CrossEntropyLoss.Config()\n",
            DS_MTP,
            r"CrossEntropyLoss.Config with num_mtp_layers 1: the MTP decoder returns a list",
        ),
        (DS_LOSS, "", r"MTPLoss without num_mtp_layers: torchtitan raises 'MTPLoss expects"),
    ],
)
def test_the_loss_must_be_mtps(tmp_path: Path, loss: str, mtp: str, match: str) -> None:
    """The baseline's ChunkedLossWrapper skips the LM head, which the MTP forward refuses
    (b5bcd76c mtp.py:268-272); its list of logits is MTPLoss's only (:267-275, :346-350)."""
    body = mtp + DS_PAR.format(more="") + DS_TOKENS + loss
    path = tmp_path / "job.py"
    text = HEAD.format(model="deepseek_v3", base="deepseek_v3_671b")
    imports = DS_LOSS_IMPORT + "from torchtitan.components.loss import CrossEntropyLoss\n"
    path.write_text(imports + text + body + "    return config\n")
    with pytest.raises(InputError, match=match):
        torchtitan_config.load(path, "h100-sxm-80gb", 512)


@pytest.mark.parametrize(
    ("body", "kw", "match"),
    [
        (  # decoder.py:173-183; gpt_oss's model_registry defaults to varlen (__init__.py:391)
            "    config.parallelism.context_parallel_degree = 2\n",
            {"model": "gpt_oss", "base": "gpt_oss_20b"},
            r"attn_backend 'varlen' with context_parallel_degree 2",
        ),
        (  # context_parallel/api.py:24-33
            "    config.parallelism = ParallelismConfig(context_parallel_degree=2, "
            "spmd_backend='partial_dtensor')\n",
            {},
            r"spmd_backend: \"partial_dtensor\" with context_parallel_degree 2",
        ),
        (  # config_utils.py:97-101
            "    config.model_spec = model_registry('8B', attn_backend='sdpa')\n",
            {},
            r"attn_backend 'sdpa': torchtitan raises",
        ),
        (  # llama3/__init__.py:369-374: no such parameter, TypeError
            "    config.model_spec = model_registry('8B', num_mtp_layers=1)\n",
            {},
            r"model_registry\(\.\.\., num_mtp_layers=\.\.\.\): torchtitan raises TypeError",
        ),
        (  # config_utils.py:62-68, :221-229
            "    config.model_spec = model_registry('8B', tp_gemm_backend='dist_gemm')\n",
            {},
            r"tp_gemm_backend \"dist_gemm\"",
        ),
        (  # token_dispatcher.py:1237-1241
            "    config.model_spec = model_registry('30B-A3B', moe_comm_backend='deepep')\n",
            {"model": "qwen3", "base": "qwen3_30b_a3b"},
            r"'deepep' with expert_parallel_degree 1",
        ),
        (  # float8.py:68-72: emulation, no float8 GEMMs
            "    config.model_spec = model_registry('8B', converters=[Float8LinearConverter."
            "Config(emulate=True, filter_fqns=['lm_head'])])\n",
            {},
            r"emulate: true: float8 emulation",
        ),
        (  # a ParamGroupConfig of DistMuon (optimizer/optimizer.py:144-146)
            "    config.optimizer.param_groups = [ParamGroupConfig(pattern='.*', "
            "optimizer_name='DistMuon')]\n",
            {},
            r"optimizer_name \"DistMuon\"",
        ),
    ],
)
def test_what_torchtitan_raises_on_exits_2(
    tmp_path: Path, body: str, kw: dict[str, str], match: str
) -> None:
    with pytest.raises(InputError, match=match):
        _module(tmp_path, body, **kw)  # type: ignore[arg-type]


def test_fsdp_symmetric_memory_below_sm90(tmp_path: Path) -> None:
    """b5bcd76c config/configs.py:270-280: compute capability below 9.0 raises (A100 is 8.0)."""
    body = "    config.parallelism.enable_fsdp_symm_mem = True\n"
    with pytest.raises(InputError, match=r"enable_fsdp_symm_mem: True on a100"):
        _module(tmp_path, body, gpu="a100-sxm-80gb")
    assert _module(tmp_path, body).require_layout().dp == 8


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[fault_tolerance]\nenable = true\n", r"fault_tolerance\.enable: true"),
        ('[optimizer]\nname = "SGD"\n', r"optimizer\.name: \"SGD\".*:314-319"),
        (  # components/optimizer.py:283-286
            "[optimizer]\nearly_step_in_backward = true\n[parallelism]\n"
            "data_parallel_shard_degree = 4\npipeline_parallel_degree = 2\n",
            r"not supported with Pipeline Parallel",
        ),
        (  # components/quantization/float8.py:65-69
            'converters = ["quantize.linear.float8"]\n[quantize.linear.float8]\n'
            'recipe_name = "tensorwise"\nenable_fsdp_float8_all_gather = true\n',
            r"recipe_name: \"tensorwise\" beside enable_fsdp_float8_all_gather",
        ),
        ('[optimizer]\nimplementation = "fused_opt_states_bf16"\n', r"components/optimizer.py:298"),
    ],
)
def test_what_e347b1e5_raises_on_exits_2(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        _toml(tmp_path, text)


DUALPIPE = """[model]
name = "deepseek_v3"
flavor = "671B"
[training]
local_batch_size = 16
seq_len = 4096
[parallelism]
data_parallel_shard_degree = 64
pipeline_parallel_degree = 8
expert_parallel_degree = 64
pipeline_parallel_schedule = "DualPipeV"
{overlap}
[activation_checkpoint]
mode = "{mode}"
"""


@pytest.mark.parametrize(
    ("overlap", "mode", "match"),
    [
        ("", "full", r"Activation Checkpointing cannot be used together"),  # dual_pipe_v.py:45-49
        ("", "none", r"overlap it runs .* is not modelled"),
        ("pipeline_parallel_expert_parallel_overlap = false", "full", None),
    ],
)
def test_dualpipev_expert_overlap(tmp_path: Path, overlap: str, mode: str, match: str) -> None:
    """e347b1e5 job_config.py:420 turns the EP / PP overlap on by default; dual_pipe_v.py:32-51
    runs it under DualPipeV with pp and ep > 1, and raises beside activation checkpointing."""
    path = tmp_path / "dpv.toml"
    path.write_text(DUALPIPE.format(overlap=overlap, mode=mode))
    if match is None:
        assert torchtitan_config.load(path, "h100-sxm-80gb", 512).require_layout().pp == 8
        return
    with pytest.raises(InputError, match=match):
        torchtitan_config.load(path, "h100-sxm-80gb", 512)
