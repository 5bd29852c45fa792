"""Reading Megatron-LM launch scripts as whole commands: the run's environment, YAML configs,
the training command among conversion and evaluation commands, `-m` modules, and the
multimodal examples refused.

Oracles: Megatron-LM d98e8a64's argument semantics (arguments.py: defaults, flags that need
others, what validate_args asserts), restated in each test, and hand arithmetic in comments.
"""

from __future__ import annotations

import pytest
from megatron_scripts import LLAMA3_8B, SMALL, read

from planner.inputs import megatron_args
from planner.inputs.errors import InputError


@pytest.mark.parametrize(
    ("prefix", "expandable", "margin"),
    [
        ("", None, None),
        # a launch script's exports (the Megatron-MoE-ModelZoo's ENV_VARS, Megatron-Bridge's
        # recipes), and PyTorch's newer name for the allocator's settings
        ("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n", True, None),
        (
            "PYTORCH_ALLOC_CONF=garbage_collection_threshold:0.6,expandable_segments:True ",
            True,
            None,
        ),
        ("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False\n", None, None),
        # MLPerf's DeepSeek-V3 configs: NVTE_EXT_MARGIN_SM=16
        ("NVTE_EXT_MARGIN_SM=16\n", None, 16),
    ],
)
def test_the_runs_environment_is_read(prefix: str, expandable: bool | None, margin: int) -> None:
    training = megatron_args.to_plan(prefix + SMALL, "h100-sxm-80gb", 8)["training"]
    assert training.get("expandable_segments") == expandable
    assert training.get("gemm_sm_margin") == margin


def test_a_margin_that_is_no_count_is_bad_input() -> None:
    with pytest.raises(InputError, match="NVTE_EXT_MARGIN_SM: expected a count of SMs"):
        megatron_args.to_plan("NVTE_EXT_MARGIN_SM=x\n" + SMALL, "h100-sxm-80gb", 8)


def test_a_yaml_cfg_line_is_refused_because_megatron_ignores_its_flags() -> None:
    # Megatron-LM d98e8a64 parse_args: with --yaml-cfg, args = load_yaml(path), which warns
    # "argparse arguments will be ignored": the line's own flags (here a whole model) do not run
    with pytest.raises(InputError, match=r"--yaml-cfg cfg\.yaml: Megatron-LM then takes every"):
        megatron_args.to_plan(LLAMA3_8B + " --yaml-cfg cfg.yaml", "h100-sxm-80gb", 8)


# --- a file that launches more than one Python script

EVAL = "torchrun --nproc_per_node 1 tasks/main.py --task LAMBADA --tensor-model-parallel-size 1"
CONVERT = "python tools/checkpoint/convert.py --target-tensor-parallel-size 1 --load /ckpt"


def test_the_training_command_is_read_alone() -> None:
    """A checkpoint conversion before training and an evaluation after it: each their own
    flags (an evaluation at tp 1 with mbs 8 was read into the training run's layout, and a
    converter's flag refused as a misspelt Megatron-LM flag); the training command is read
    alone, noted. The oracle: the training command by itself."""
    alone = read(LLAMA3_8B)
    both = read(f"{CONVERT}\n{LLAMA3_8B}\n{EVAL} --micro-batch-size 8 --seq-length 2048\n")
    assert both.doc == alone.doc
    assert any("pretrain_gpt.py's flags alone" in n and "main.py" in n for n in both.notes)
    twice = read(f"{LLAMA3_8B}\n{LLAMA3_8B}")  # the same run launched again is one run
    assert twice.doc == alone.doc


def test_two_different_training_commands_are_refused() -> None:
    other = LLAMA3_8B.replace("--micro-batch-size 1", "--micro-batch-size 2")
    with pytest.raises(InputError, match="launches 2 training commands with different flags"):
        read(f"{LLAMA3_8B}\n{other}")


def test_a_module_run_with_dash_m_is_the_script() -> None:
    """`python -m torch.distributed.run ... -m examples.mimo.pretrain_mimo` launches that
    module (a launcher module is not the script): the GPU count is the launcher's, the flags
    the module's; the MIMO example's heterogeneous grids (--llm-tp, --encoder-tp: the language
    model and the encoder on ranks of their own) are refused, not read as tp 1."""
    line = LLAMA3_8B.split("torchrun --nproc_per_node 8 pretrain_gpt.py ")[1]
    model = LLAMA3_8B.split("torchrun")[0]
    text = f"{model}python -m torch.distributed.run --nproc-per-node 8 -m pretrain_gpt {line}"
    got = megatron_args.read(text, "h100-sxm-80gb", None, "train.sh")
    assert got.doc == read(LLAMA3_8B).doc
    hetero = f"{model}torchrun --nproc-per-node 8 -m examples.mimo.pretrain_mimo {line} --llm-tp 2"
    with pytest.raises(InputError, match=r"--llm-tp: examples/mimo/pretrain_mimo\.py places"):
        megatron_args.read(hetero, "h100-sxm-80gb", 8, "train.sh")


def test_the_multimodal_examples_models_are_refused() -> None:
    """Megatron-LM's examples/multimodal/train.py (the NVLM scripts) builds its models from
    --language-model-type / --vision-model-type (examples/multimodal/config.py): read as
    pretrain_vlm.py's LLaVA, a Qwen2 72B + InternViT-6B run was sized with a second 72B model as
    its vision encoder (323 GiB); refused, naming the flag."""
    line = LLAMA3_8B.replace("pretrain_gpt.py", "examples/multimodal/train.py")
    text = line.rstrip() + " --language-model-type llama3_8b --vision-model-type clip\n"
    with pytest.raises(InputError, match="--language-model-type: Megatron-LM's examples/multi"):
        read(text)
