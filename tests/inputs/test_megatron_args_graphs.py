"""Reading Megatron-LM lines with CUDA graphs (--cuda-graph-impl, --cuda-graph-modules and what
Megatron asserts of them), deterministic mode and NVFP4.

Oracles: Megatron-LM d98e8a64's argument semantics (arguments.py: defaults, flags that need
others, what validate_args asserts), restated in each test, and hand arithmetic in comments.
"""

from __future__ import annotations

import re

import pytest
from megatron_scripts import LLAMA3_8B

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan

NO_NAN = "--no-check-for-nan-in-loss-and-grad"


@pytest.mark.parametrize(
    ("extra", "graphs", "impl"),
    [
        ("", False, None),
        ("--cuda-graph-impl none", False, None),
        ("--cuda-graph-impl local", True, "local"),
        (
            "--cuda-graph-impl transformer_engine --cuda-graph-scope attn",
            True,
            "transformer_engine",
        ),
        (f"--cuda-graph-impl full_iteration {NO_NAN}", True, "full_iteration"),
        ("--enable-cuda-graph", True, "local"),  # deprecated: local (arguments.py d98e8a64)
        ("--external-cuda-graph", True, "transformer_engine"),  # deprecated: transformer_engine
        # the deprecated full_iteration region: arguments.py migrates it to the implementation
        (
            f"--cuda-graph-impl local --cuda-graph-modules full_iteration {NO_NAN}",
            True,
            "full_iteration",
        ),
    ],
)
def test_cuda_graph_flags_are_read(extra: str, graphs: bool, impl: str | None) -> None:
    """Megatron-LM d98e8a64 arguments.py: --cuda-graph-impl none | local | transformer_engine |
    full_iteration, kept as the job's (`Job.cuda_graph_impl`); --enable-cuda-graph and
    --external-cuda-graph set local and transformer_engine."""
    text = LLAMA3_8B.replace("--bf16", f"--bf16 {extra}")
    plan = parse_plan(megatron_args.to_plan(text, "h100-sxm-80gb", 16))
    assert plan.job.cuda_graphs is graphs and plan.job.cuda_graph_impl == impl


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        # validate_args: "--no-check-for-nan-in-loss-and-grad should be set with
        # --cuda-graph-impl=full_iteration for training"
        ("--cuda-graph-impl full_iteration", "--cuda-graph-impl"),
        ("--cuda-graph-impl local --cuda-graph-modules full_iteration", "--cuda-graph-impl"),
        # TransformerConfig: fine_grained_offloading_max_inflight_offloads "must be a
        # non-negative integer when using fine-grained activation offloading with
        # full-iteration CUDA graphs"
        (
            f"--cuda-graph-impl full_iteration {NO_NAN} --fine-grained-activation-offloading "
            "--offload-modules core_attn",
            "--fine-grained-offloading-max-inflight-offloads",
        ),
        (
            f"--cuda-graph-impl full_iteration {NO_NAN} --fine-grained-activation-offloading "
            "--offload-modules core_attn --fine-grained-offloading-max-inflight-offloads -1",
            "--fine-grained-offloading-max-inflight-offloads",
        ),
    ],
)
def test_what_megatron_asserts_of_a_full_iteration_graph_exits_2(extra: str, flag: str) -> None:
    """Megatron-LM d98e8a64 refuses these lines at start-up; planner said they fit."""
    text = LLAMA3_8B.replace("--bf16", f"--bf16 {extra}")
    with pytest.raises(InputError, match=re.escape(flag)):
        megatron_args.to_plan(text, "h100-sxm-80gb", 16)
    # fp16's dynamic loss scaling turns the NaN check off itself (validate_args, before it)
    if "offload" not in extra:
        fp16 = text.replace("--bf16", "--fp16")
        assert parse_plan(megatron_args.to_plan(fp16, "h100-sxm-80gb", 16)).job.cuda_graphs
    else:  # 0 (a join after every copy) is non-negative
        inflight = "--fine-grained-offloading-max-inflight-offloads"
        fixed = extra.split(f" {inflight}")[0] + f" {inflight} 0"
        fixed_text = LLAMA3_8B.replace("--bf16", f"--bf16 {fixed}")
        plan = parse_plan(megatron_args.to_plan(fixed_text, "h100-sxm-80gb", 16))
        assert plan.require_layout().offload_modules == ("core_attn",)


def test_offloading_under_graphs_without_warmup_steps_exits_2() -> None:
    """TransformerConfig (Megatron-LM d98e8a64 transformer_config.py:2963-2966) asserts
    cuda_graph_warmup_steps > 0 beside fine-grained activation offloading under any CUDA-graph
    implementation; its default, 3 (:1066), and any positive count are read."""
    extra = (
        "--cuda-graph-impl transformer_engine --cuda-graph-modules attn "
        "--fine-grained-activation-offloading --offload-modules core_attn"
    )
    text = LLAMA3_8B.replace("--bf16", f"--bf16 {extra}")
    for steps in ("", " --cuda-graph-warmup-steps 1"):
        plan = parse_plan(megatron_args.to_plan(text + steps, "h100-sxm-80gb", 16))
        assert plan.require_layout().offload_modules == ("core_attn",)
    for steps in ("0", "-1"):
        with pytest.raises(InputError, match=f"--cuda-graph-warmup-steps: {steps}:"):
            megatron_args.to_plan(f"{text} --cuda-graph-warmup-steps {steps}", "h100-sxm-80gb", 16)


@pytest.mark.parametrize(
    ("extra", "modules"),
    [
        ("--cuda-graph-impl local", ()),
        ("--cuda-graph-impl local --cuda-graph-modules full", ()),
        ("--cuda-graph-impl transformer_engine --cuda-graph-scope attn", ("attn",)),
        (
            "--cuda-graph-impl transformer_engine --cuda-graph-modules attn moe_router "
            "moe_preprocess",
            ("attn", "moe_router", "moe_preprocess"),
        ),
    ],
)
def test_cuda_graph_modules_are_read(extra: str, modules: tuple[str, ...]) -> None:
    """--cuda-graph-modules (or the deprecated --cuda-graph-scope) names the regions captured;
    "full" (the default) the whole layer, which the job keeps as ()."""
    text = LLAMA3_8B.replace("--bf16", f"--bf16 {extra}")
    plan = parse_plan(megatron_args.to_plan(text, "h100-sxm-80gb", 16))
    assert plan.job.cuda_graphs and plan.job.cuda_graph_modules == modules


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        ("--cuda-graph-impl local --cuda-graph-modules attention", "--cuda-graph-modules"),
        (
            "--cuda-graph-impl transformer_engine --cuda-graph-modules moe_preprocess",
            "moe_preprocess",
        ),
    ],
)
def test_bad_cuda_graph_modules_are_bad_input(extra: str, flag: str) -> None:
    """A region Megatron-Core does not know, and moe_preprocess without moe_router under
    Transformer Engine's graphs (transformer_config.py:2821-2824 d98e8a64 asserts it; the local
    implementation appends the router first, :2806-2816), are refused naming what is wrong."""
    text = LLAMA3_8B.replace("--bf16", f"--bf16 {extra}")
    with pytest.raises(InputError, match=flag):
        parse_plan(megatron_args.to_plan(text, "h100-sxm-80gb", 16))


@pytest.mark.parametrize(
    "extra",
    ["--cuda-graph-impl always", "--enable-cuda-graph --cuda-graph-impl local"],
)
def test_bad_cuda_graph_flags_are_bad_input(extra: str) -> None:
    """An impl Megatron does not accept, and the deprecated flag with the new one (Megatron
    asserts it), are refused naming the flag."""
    text = LLAMA3_8B.replace("--bf16", f"--bf16 {extra}")
    with pytest.raises(InputError, match="--cuda-graph-impl"):
        megatron_args.to_plan(text, "h100-sxm-80gb", 16)


def test_deterministic_mode_on_blackwell_is_noted_not_modelled() -> None:
    # Transformer Engine runs no cuDNN fused attention backward in deterministic mode on
    # Blackwell before cuDNN 9.18.1 (TransformerEngine PRs #2130, #2584): the step time is not
    # modelled there, and check says so; on Hopper cuDNN's deterministic backward runs
    line = LLAMA3_8B.replace("--bf16", "--bf16 --deterministic-mode")
    gb200 = megatron_args.read(line, "gb200-nvl72", 16)
    assert any(n.startswith("--deterministic-mode") for n in gb200.not_modelled)
    assert "--deterministic-mode" not in gb200.ignored
    h100 = megatron_args.read(line, "h100-sxm-80gb", 16)
    assert not any(n.startswith("--deterministic-mode") for n in h100.not_modelled)


def test_nvfp4_lines_are_read_and_a_custom_quantiser_is_refused() -> None:
    # Megatron-LM d98e8a64: --fp4-format e2m1 with --fp4-recipe nvfp4 (TransformerConfig's
    # default) or custom (a user quantiser factory planner cannot know)
    nvfp4 = LLAMA3_8B.replace("--bf16", "--bf16 --fp4-format e2m1 --fp4-param-gather")
    job = parse_plan(megatron_args.to_plan(nvfp4, "b200-sxm-180gb", 16)).job
    assert job.precision == "fp4" and job.fp4_param_gather
    custom = nvfp4.replace("--fp4-format e2m1", "--fp4-format e2m1 --fp4-recipe custom")
    with pytest.raises(InputError, match="--fp4-recipe: 'custom'"):
        megatron_args.to_plan(custom, "b200-sxm-180gb", 16)
    # Hopper has no FP4 tensor cores: the line is bad input for that GPU, named
    with pytest.raises(InputError, match=r'training\.precision: "fp4"'):
        parse_plan(megatron_args.to_plan(nvfp4, "h100-sxm-80gb", 16))
