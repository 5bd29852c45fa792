"""torchtitan float8 on an MoE model: the router's gate stays bf16, the routed experts run in
bf16 unless `[torchtitan] float8_experts` turns torchtitan's grouped-GEMM float8 converter on,
and planner's prediction times what the launch files run. Also: the module target turns the
baselines' profiler off.

Oracles (pytorch/torchtitan at e347b1e5, the TOML era, and b5bcd76c, the Python configurations):
- the gate is an nn.Linear / Linear.Config (e347b1e5 models/moe/moe.py:224, b5bcd76c
  models/common/moe.py:195) that the float8 linear converter converts unless filter_fqns names
  it; torchtitan's own MoE float8 configurations filter "router.gate" (e347b1e5
  deepseek_v3/train_configs/deepseek_v3_671b.toml:74; b5bcd76c deepseek_v3/config_registry.py:262)
  and turn the experts' converter on beside it (toml:76-77 `[quantize.grouped_mm.float8] fqns =
  ["experts"]`, converter registered as "quantize.grouped_mm.float8" at float8.py:239;
  config_registry.py:265-267 `Float8GroupedExpertsConverter.Config(model_compile_enabled=...)`);
- the routed experts (GroupedExperts: grouped GEMMs, not nn.Linear) are float8 only through that
  converter, and then rowwise for all three GEMMs (pytorch/ao 01374eb5
  torchao/prototype/moe_training/scaled_grouped_mm.py `_Float8GroupedMM`: forward, grad_A and
  grad_B each `torch._scaled_grouped_mm` on rowwise-scaled float8): the expert GEMM times by hand
  from `gemm.gemm_time` at the bf16 or the FP8 rate;
- e347b1e5 float8.py:193-198 asserts pipeline and context parallel degree 1 for that converter;
  b5bcd76c components/quantization/utils.py:33-64 raises for it with the DeepEP dispatcher;
- b5bcd76c llama3/config_registry.py:203-206 turns the profiler on in llama3_8b()
  (Profiler.Config.enable_profiling, tools/profiler.py:123, default False).
"""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from test_emit_torchtitan_module import check_module

from planner.emit.launch import render
from planner.inputs import torchtitan_config, torchtitan_toml
from planner.inputs.errors import InputError
from planner.inputs.hybrid import LayerKind
from planner.inputs.plan import Job, Plan, load_plan
from planner.inputs.torchtitan import TorchtitanSection
from planner.model import cost, layer_time, linear_time, memory
from planner.model.gemm import gemm_time, grouped_rows, quant_bytes
from planner.search.rules import check_plan, violations

QWEN = """
[model]
name = "qwen3-30b-a3b"

[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 16

[training]
framework = "torchtitan"
seq_length = 4096
global_batch_size = 128
precision = "{precision}"
fp8_recipe = "{recipe}"

[parallel]
dp = {dp}
cp = {cp}
ep = 8
micro_batch_size = 2
zero_stage = 3
recompute = "selective"
moe_token_dispatcher_type = "{dispatcher}"

[torchtitan]
{titan}
"""


def _plan(
    tmp_path: Path,
    titan: str = "",
    precision: str = "fp8",
    recipe: str = "rowwise",
    cp: int = 1,
    dispatcher: str = "alltoall",
) -> Path:
    text = QWEN.format(
        precision=precision, recipe=recipe, dp=16 // cp, cp=cp, dispatcher=dispatcher, titan=titan
    )
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


def _checked(path: Path) -> Plan:
    return check_plan(load_plan(path))


def _prediction(plan: Plan) -> tuple[float, float]:
    lay = plan.require_layout()
    return cost.estimate(plan.job, lay).step_time_s, memory.estimate(plan.job, lay).peak


# --- the router's gate -----------------------------------------------------------------------


def test_both_targets_keep_the_router_gate_in_bf16(tmp_path: Path) -> None:
    plan = _checked(_plan(tmp_path))
    doc = tomllib.loads(render(plan, "torchtitan", "job")[1])
    assert doc["quantize"]["linear"]["float8"]["filter_fqns"] == ["output", "router.gate"]
    assert doc["model"]["converters"] == ["quantize.linear.float8"]  # experts: torchtitan's default
    assert "grouped_mm" not in doc["quantize"]
    module = render(plan, "torchtitan-module", "job")[1]
    assert "filter_fqns=['lm_head', 'router.gate']" in module
    assert "Float8GroupedExpertsConverter" not in module
    check_module(module)


def test_a_filter_that_leaves_the_gate_to_float8_is_said(tmp_path: Path) -> None:
    """Both readers warn (Plan.inert) where the gate is float8: planner times it in bf16."""
    plan = _checked(_plan(tmp_path))
    toml = tmp_path / "torchtitan.toml"
    text = render(plan, "torchtitan", "job")[1]
    toml.write_text(text.replace('["output", "router.gate"]', '["output"]'))
    module = tmp_path / "planner_job.py"
    text = render(plan, "torchtitan-module", "job")[1]
    module.write_text(text.replace("['lm_head', 'router.gate']", "['lm_head']"))
    for path in (toml, module):
        notes = torchtitan_config.load(path, None, None).inert
        assert any("router.gate" in message and "bf16" in message for _, message in notes), path
    # the filter planner writes says nothing
    for target, name in (("torchtitan", "t.toml"), ("torchtitan-module", "m.py")):
        (tmp_path / name).write_text(render(plan, target, "job")[1])
        notes = torchtitan_config.load(tmp_path / name, None, None).inert
        assert not any("router.gate" in message for _, message in notes)


# --- the experts' precision ------------------------------------------------------------------


def _moe(job: Job) -> LayerKind:
    return next(k for k in job.arch.kinds if k.ffn == "moe")


def _expert_gemms(plan: Plan) -> tuple[list[float], list[float], list[float], list[float]]:
    """(times, casts, by-hand bf16 times, by-hand FP8 times) of the routed experts' GEMMs."""
    job, lay = plan.job, plan.require_layout()
    gpu = layer_time.gpu_of(job)
    kind = _moe(job)
    t = float(lay.micro_batch_size * job.seq_length // lay.cp)
    lin = linear_time.linear_times(job, lay, gpu, kind, t, 1.0)
    times, casts, bf16, fp8 = [], [], [], []
    for (m, k, n, c), part, tm, cast in zip(
        lin.shapes, lin.parts, lin.times, lin.casts, strict=True
    ):
        if part != "expert":
            continue
        times.append(tm)
        casts.append(cast)
        rows = grouped_rows(m)
        bf16.append(gemm_time(rows, k, n, gpu.peak_bf16, gpu.ridge, gpu.e_bf16, c))
        fp8.append(gemm_time(rows, k, n, gpu.peak_linear, gpu.ridge, gpu.e_linear, c))
    assert times
    return times, casts, bf16, fp8


def test_without_float8_experts_the_experts_are_timed_in_bf16(tmp_path: Path) -> None:
    plan = _checked(_plan(tmp_path))
    times, casts, bf16, fp8 = _expert_gemms(plan)
    assert times == bf16 and casts == [0.0] * len(casts)
    assert all(b > f for b, f in zip(bf16, fp8, strict=True))  # the FP8 rate they were timed at
    job = plan.job
    lin = linear_time.linear_times(
        job,
        plan.require_layout(),
        layer_time.gpu_of(job),
        _moe(job),
        8192.0,
        1.0,
    )
    # the attention projections stay float8: quantised
    assert all(c > 0 for c, p in zip(lin.casts, lin.parts, strict=True) if p == "attn")


def test_float8_experts_are_timed_in_fp8_with_rowwise_casts(tmp_path: Path) -> None:
    plan = _checked(_plan(tmp_path, "float8_experts = true", recipe="tensorwise"))
    job, lay = plan.job, plan.require_layout()
    times, casts, _, fp8 = _expert_gemms(plan)
    assert times == fp8
    # rowwise whatever the linear recipe (tensorwise here): 2 x (amax read 2 + cast read 2 +
    # FP8 write 1) = 10 bytes per element (gemm.FP8_QUANT_BYTES), uncompiled, Hopper
    assert quant_bytes("rowwise", False) == 10.0
    gpu = layer_time.gpu_of(job)
    t = float(lay.micro_batch_size * job.seq_length)
    lin = linear_time.linear_times(job, lay, gpu, _moe(job), t, 1.0)
    want = [
        c * 10.0 * (m * k + m * n) / gpu.hbm
        for (m, k, n, c), p in zip(lin.shapes, lin.parts, strict=True)
        if p == "expert"
    ]
    assert casts == pytest.approx(want, rel=1e-12)


def test_rowwise_with_gw_hp_leaves_the_experts_weight_gradient_alone(tmp_path: Path) -> None:
    """torchao's rowwise_with_gw_hp keeps the linear layers' weight gradients in bf16; the
    experts are not its Float8Linear: their weight gradient runs at their own rate (bf16 here),
    so the layer's backward is its GEMMs' forward + the non-expert GEMMs' forward x the
    slowdown + the experts' forward + the rest (layer_time._core, by hand from its fields), and
    the backward's share of the weights' cast, which torchao runs on every use
    (`linear_time.weights_cast_per_use`): eager (compile off), its cast and layout copy, 33 + 2
    of the 33 + 33 + 2 bytes an element (`gemm.eager_float8`; the experts are bf16 here)."""
    plan = _checked(_plan(tmp_path, recipe="rowwise_with_gw_hp"))
    job, lay = plan.job, plan.require_layout()
    gpu = layer_time.gpu_of(job)
    core = layer_time._core(job, lay, gpu, _moe(job))
    slow = (gpu.peak_linear * gpu.e_linear) / (gpu.peak_bf16 * gpu.e_bf16)
    assert slow > 1.5
    experts = sum(tm for tm, p in zip(core.times, core.parts, strict=True) if p == "expert")
    rest = core.attn_bwd + 2 * core.streamed / 3 + core.perm / 2
    cast = linear_time.linear_times(job, lay, gpu, _moe(job), core.t, core.load).weight_cast
    assert core.weight_cast == 0.0 and cast > 0
    want = core.gemm_fwd + (core.gemm_fwd - experts) * slow + experts + rest + cast * 35 / 68
    assert core.bwd == pytest.approx(want, rel=1e-12)


def test_the_qa_repro_is_timed_as_launched(tmp_path: Path) -> None:
    """The QA's Qwen3-30B-A3B rowwise plan: off, its step is faster than with float8 experts
    only by what the experts' bf16 GEMMs cost over FP8 less their casts, i.e. the two differ;
    the memory is the same (torchtitan's float8 changes no stored bytes without the float8
    all-gather). Each launch file reads back to its own plan's prediction."""
    off = _checked(_plan(tmp_path))
    (tmp_path / "on").mkdir()
    on = _checked(_plan(tmp_path / "on", "float8_experts = true"))
    assert on.job.titan.float8_experts and not off.job.titan.float8_experts
    (t_off, m_off), (t_on, m_on) = _prediction(off), _prediction(on)
    assert t_off != t_on and m_off == m_on
    for plan in (off, on):
        for target, name in (("torchtitan", "t.toml"), ("torchtitan-module", "m.py")):
            path = tmp_path / name
            path.write_text(render(plan, target, "job")[1])
            back = check_plan(torchtitan_config.load(path, None, None))
            assert back.job.titan.float8_experts == plan.job.titan.float8_experts
            assert _prediction(back) == _prediction(plan)


# --- float8_experts in the launch files ------------------------------------------------------


def test_float8_experts_are_written_in_both_targets(tmp_path: Path) -> None:
    plan = _checked(_plan(tmp_path, "float8_experts = true\ncompile = true"))
    doc = tomllib.loads(render(plan, "torchtitan", "job")[1])
    assert doc["model"]["converters"] == ["quantize.linear.float8", "quantize.grouped_mm.float8"]
    assert doc["quantize"]["grouped_mm"]["float8"] == {"fqns": ["experts"]}
    torchtitan_toml.check_fields(doc, "toml")  # every table and field is e347b1e5's
    module = render(plan, "torchtitan-module", "job")[1]
    assert "Float8GroupedExpertsConverter.Config(model_compile_enabled=True)" in module
    check_module(module)


def test_float8_experts_under_cp_are_the_module_targets(tmp_path: Path) -> None:
    plan = _checked(_plan(tmp_path, "float8_experts = true", cp=2))
    with pytest.raises(InputError, match=r"torchtitan.float8_experts: true: .*float8.py:196-198"):
        render(plan, "torchtitan", "job")
    module = render(plan, "torchtitan-module", "job")[1]
    assert "Float8GroupedExpertsConverter" in module
    # a TOML with the converter at cp 2 exits 2 as e347b1e5 asserts
    bare = _checked(_plan(tmp_path, cp=2))
    text = render(bare, "torchtitan", "job")[1]
    text = text.replace(
        'converters = ["quantize.linear.float8"]',
        'converters = ["quantize.linear.float8", "quantize.grouped_mm.float8"]',
    )
    toml = tmp_path / "t.toml"
    toml.write_text(text + '\n[quantize.grouped_mm.float8]\nfqns = ["experts"]\n')
    with pytest.raises(InputError, match=r"model.converters: .*float8.py:196-198"):
        torchtitan_config.load(toml, None, None)


def test_float8_experts_with_deepep_are_refused(tmp_path: Path) -> None:
    path = _plan(tmp_path, "float8_experts = true", dispatcher="flex")
    with pytest.raises(InputError, match=r"torchtitan.float8_experts: true: .*utils.py:33-64"):
        _checked(path)
    plan = _checked(_plan(tmp_path, dispatcher="flex"))
    text = render(plan, "torchtitan-module", "job")[1].replace(
        "model_compile_enabled=False)]",
        "model_compile_enabled=False), Float8GroupedExpertsConverter.Config()]",
    )
    module = tmp_path / "planner_job.py"
    module.write_text(text)
    with pytest.raises(InputError, match=r"utils.py:33-64"):
        torchtitan_config.load(module, None, None)


def test_float8_experts_needs_fp8_and_experts(tmp_path: Path) -> None:
    plan = _checked(_plan(tmp_path))
    job, lay = plan.job, plan.require_layout()
    on = TorchtitanSection(float8_experts=True)
    bf16 = replace(job, precision="bf16", torchtitan=on)
    assert any(v.field == "torchtitan.float8_experts" for v in violations(bf16, lay))
    # tensorwise at cp 2: e347b1e5 asserts cp 1, b5bcd76c has no tensorwise recipe
    # (Float8LinearConverter.Config recipe_name Literal['rowwise', 'rowwise_with_gw_hp'])
    cp = _checked(_plan(tmp_path, cp=2, recipe="tensorwise"))
    both = replace(cp.job, torchtitan=on)
    assert any(v.field == "training.fp8_recipe" for v in violations(both, cp.require_layout()))


def test_a_toml_with_only_the_experts_in_float8_is_refused(tmp_path: Path) -> None:
    plan = _checked(_plan(tmp_path))
    text = render(plan, "torchtitan", "job")[1].replace(
        'converters = ["quantize.linear.float8"]', 'converters = ["quantize.grouped_mm.float8"]'
    )
    toml = tmp_path / "t.toml"
    toml.write_text(text)
    with pytest.raises(InputError, match=r"model\.converters: .*add 'quantize\.linear\.float8'"):
        torchtitan_config.load(toml, None, None)


# --- the profiler ----------------------------------------------------------------------------


def test_the_module_turns_the_baselines_profiler_off(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(
        '[model]\nname = "llama3.1-8b"\n\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n\n'
        "[training]\nframework = 'torchtitan'\nseq_length = 8192\nglobal_batch_size = 64\n\n"
        "[parallel]\nzero_stage = 3\nrecompute = 'full'\n"
    )
    plan = _checked(path)
    module = render(plan, "torchtitan-module", "job")[1]
    assert "config = llama3_8b()" in module
    assert "    config.profiler.enable_profiling = False\n" in module
    check_module(module)  # config.profiler.enable_profiling is a field of Profiler.Config
    (tmp_path / "planner_job.py").write_text(module)
    back = check_plan(torchtitan_config.load(tmp_path / "planner_job.py", None, None))
    assert _prediction(back) == _prediction(plan)
