"""`check --megatron-args` of two lines the reader read past (s34): --fp8-param-gather on an
inference entry point's line without a sharded optimizer, and --optimizer dist_muon alone.

Oracles: Megatron-LM d98e8a64.
- megatron/training/arguments.py:1095-1097: `if args.fp8_param_gather: assert
  args.use_distributed_optimizer or args.use_torch_fsdp2 or args.use_megatron_fsdp or not
  torch.is_grad_enabled()`: only a run without gradients (tools/run_text_generation_server.py:119
  `@torch.inference_mode()`) gets past it alone, and there --fp8-param-gather is
  TransformerConfig.fp8_param (argument_utils.py:312), with which the layers are built under
  `get_fp8_context(..., is_init=True)` (transformer_block.py:354-355): FP8 weights as the
  parameters at ZeRO 0, which planner does not model (it predicts bf16 weights beside an FP8
  cache there, planner.model.buffers.quantised_weight_bytes): the line exits 2 naming the flag,
  as --fp4-param-gather does (test_megatron_args_fp4.py).
- arguments.py:1727-1736: `--optimizer dist_muon` becomes `optimizer = 'muon'` with
  `use_layer_wise_distributed_optimizer = True`, exactly what `--optimizer muon
  --use-distributed-optimizer` becomes (that flag cleared); training.py:2262-2263 then gives the
  DDP wrapper the distributed optimizer's sharded layout: the plan's zero_stage 1 with Muon,
  the same plan both lines read as. `_print_args` (arguments.py:1985) runs after that mapping,
  so a log prints `optimizer muon`, `use_distributed_optimizer False`,
  `use_layer_wise_distributed_optimizer True`, which must read as the same plan."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from cli_run import run
from megatron_mirror import MIRROR, source

from planner.inputs import megatron_args, megatron_log, megatron_log_args
from planner.inputs.errors import InputError
from planner.inputs.megatron_line import flags_of

GPU = "h100-sxm-80gb"
MODEL = (
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 "
    "--max-position-embeddings 4096 --vocab-size 32000 --tokenizer-type NullTokenizer "
    "--micro-batch-size 1 --global-batch-size 8 --bf16 "
)
TRAIN = "torchrun --nproc_per_node 8 pretrain_gpt.py " + MODEL
SERVE = "torchrun --nproc_per_node 8 tools/run_text_generation_server.py " + MODEL
FP8 = "--fp8-format hybrid --fp8-param-gather "


@pytest.mark.parametrize("head", [TRAIN, SERVE])
def test_fp8_gather_without_a_sharded_optimizer_is_refused(head: str) -> None:
    with pytest.raises(InputError, match="--fp8-param-gather: "):
        megatron_args.to_plan(head + FP8, GPU, 8)
    # dist_muon does not count: validate_args asserts (:1095) before it maps dist_muon (:1727)
    with pytest.raises(InputError, match="--fp8-param-gather: "):
        megatron_args.to_plan(head + FP8 + "--optimizer dist_muon", GPU, 8)
    # with the distributed optimizer it is the plan's FP8 weights at ZeRO 1
    doc = megatron_args.to_plan(head + FP8 + "--use-distributed-optimizer", GPU, 8)
    assert doc["training"]["fp8_param_gather"] and doc["parallel"]["zero_stage"] == 1


def test_check_of_an_inference_line_exits_2_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "serve.sh"
    path.write_text(SERVE + FP8 + "\n")
    argv = ["check", "--megatron-args", str(path), "--gpu", GPU, "--num-gpus", "8"]
    code, _, err = run(argv, capsys)
    assert code == 2 and f"{path}: --fp8-param-gather:" in err and "Traceback" not in err


def _optimizer(doc: dict[str, Any]) -> tuple[object, ...]:
    t = doc["training"]
    return doc["parallel"]["zero_stage"], t.get("optimizer"), t.get("muon_whole_params", False)


def test_dist_muon_reads_as_muon_with_the_distributed_optimizer() -> None:
    dist = megatron_args.to_plan(TRAIN + "--optimizer dist_muon", GPU, 8)
    both = megatron_args.to_plan(TRAIN + "--optimizer muon --use-distributed-optimizer", GPU, 8)
    assert _optimizer(dist) == _optimizer(both) == (1, "muon", False)
    assert dist["parallel"] == both["parallel"]
    # the legacy whole-parameter layout: the same reading
    legacy = " --no-use-layer-wise-param-layout"
    dist = megatron_args.to_plan(TRAIN + "--optimizer dist_muon" + legacy, GPU, 8)
    assert _optimizer(dist) == (1, "muon", True)
    # muon alone stays ZeRO 0 (validate_args leaves use_layer_wise_distributed_optimizer False)
    assert _optimizer(megatron_args.to_plan(TRAIN + "--optimizer muon", GPU, 8))[0] == 0


def _log(words: str, printed: dict[str, str]) -> megatron_log.LogRun:
    """A log whose arguments block prints `words` as validate_args leaves them, with `printed`
    over it (attribute -> printed value)."""
    flags = flags_of(words.split())
    attrs = {"world_size": "8", "data_parallel_size": "8"}
    for flag, values in flags.items():
        attrs[megatron_log_args.dest(flag)] = values[0] if values else "True"
    attrs.update(printed)
    lines = [f"  {name} {'.' * (48 - len(name))} {value}" for name, value in attrs.items()]
    text = "\n".join(
        [
            "------------------------ arguments ------------------------",
            *sorted(lines, key=str.lower),
            "-------------------- end of arguments ---------------------",
        ]
    )
    (log,) = megatron_log.parse(text + "\n", Path("x.log")).runs
    return log


def test_a_log_of_the_layer_wise_optimizer_reads_as_zero_1() -> None:
    # arguments.py:1732-1736 before _print_args (:1985): muon, the distributed optimizer cleared
    printed = {
        "optimizer": "muon",
        "use_distributed_optimizer": "False",
        "use_layer_wise_distributed_optimizer": "True",
    }
    log = _log(MODEL, printed)
    doc = megatron_log_args.reading(log, GPU, 8).doc
    assert _optimizer(doc) == (1, "muon", False)
    # without the layer-wise optimizer a muon log stays ZeRO 0
    printed["use_layer_wise_distributed_optimizer"] = "False"
    assert _optimizer(megatron_log_args.reading(_log(MODEL, printed), GPU, 8).doc)[0] == 0


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no Megatron-LM mirror on this machine")
def test_megatron_source_still_says_so() -> None:
    args = source("megatron/training/arguments.py").splitlines()
    assert args[1094].strip() == "if args.fp8_param_gather:"
    assert "not torch.is_grad_enabled()" in args[1095]
    assert args[1726].strip() == "if args.optimizer == 'dist_muon':"
    assert args[1731].strip() == "args.optimizer = 'muon'"
    assert args[1732].strip() == "args.use_layer_wise_distributed_optimizer = True"
    assert args[1734].strip() == "if args.use_distributed_optimizer:"
    assert args[1735].strip() == "args.use_layer_wise_distributed_optimizer = True"
    assert args[1736].strip() == "args.use_distributed_optimizer = False"
    assert args[1984].strip() == '_print_args("arguments", args)'
    utils = source("megatron/training/argument_utils.py").splitlines()
    assert utils[311].strip() == "kw_args['fp8_param'] = args.fp8_param_gather"
    block = source("megatron/core/transformer/transformer_block.py").splitlines()
    assert "get_fp8_context(" in block[353] and "is_init=True" in block[354]
    training = source("megatron/training/training.py").splitlines()
    assert "use_layer_wise_distributed_optimizer and use_layer_wise_param_layout" in training[2261]
    assert training[2262].strip() == "ddp_config.use_distributed_optimizer = True"
    server = source("tools/run_text_generation_server.py").splitlines()
    assert server[118].strip() == "@torch.inference_mode()"
    assert re.search(r"def main\(", server[119])
