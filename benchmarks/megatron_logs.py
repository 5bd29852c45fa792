"""Write Megatron-LM training logs in the formats Megatron-LM prints (fixtures for `planner
calibrate`, its tests and benchmarks).

Formats: NVIDIA/Megatron-LM d98e8a64 (the source of every fixture log this writes):
`megatron/training/arguments.py` `_print_args` (the arguments block, after `validate_args`),
`megatron/training/training.py` `training_log` (iteration lines) and
`megatron/training/utils/common_utils.py` `report_memory` (memory lines). The readers'
module `planner/inputs/megatron_log.py` cites the same lines.

The arguments block holds the attributes the command line sets, as `validate_args` leaves
them (dtypes as `torch.*`, `--attention-backend` as `AttnBackend.*`, the layer patterns of
`--moe-layer-freq`, `--window-attn-skip-freq` and `--linear-attention-freq` evaluated to
their lists (`moe_freq_type` / `la_freq_type`, arguments.py :327-375), `--cuda-graph-modules`
as `CudaGraphModule` members, whose list prints their reprs (arguments.py :256-294),
`encoder_num_layers` = `num_layers`, `world_size`, `data_parallel_size`), plus a few
arguments every run prints (`lr`, `seed`, `log_interval`, `train_iters`). Megatron prints
all of its ~900 arguments; the reader uses only those of `megatron_flags.READ`, and
Megatron's defaults for the others are the reader's.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Sequence
from dataclasses import dataclass

from planner.inputs.megatron_line import flags_of
from planner.inputs.megatron_log_args import DTYPES, ONE_WORD_LISTS, STORE_FALSE, dest
from planner.inputs.megatron_values import layer_pattern

TORCH_DTYPE = {short: torch for torch, short in DTYPES.items()}
DTYPE_FLAGS = ("--main-grads-dtype", "--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype")
START = datetime.datetime(2026, 1, 5, 9, 0, 0)

CudaGraphModule = enum.Enum(
    "CudaGraphModule",
    [("attn", 1), ("mlp", 2), ("moe", 3), ("moe_router", 4), ("moe_preprocess", 5), ("mamba", 6)],
)
"""megatron/core/transformer/enums.py :61-73: `str([CudaGraphModule.attn])` is Megatron's
printed `[<CudaGraphModule.attn: 1>]`."""


def _scalar(word: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(word)
        except ValueError:
            pass
    return word


def attributes(words: Sequence[str], world_size: int) -> dict[str, object]:
    """The attributes `_print_args` prints for a command line, as validate_args leaves them."""
    attrs: dict[str, object] = {
        "lr": 0.0003,
        "seed": 1234,
        "log_interval": 1,
        "train_iters": 1000,
        "fp16": False,
        "num_experts": None,
        "recompute_granularity": None,
        "params_dtype": "torch.bfloat16",
        # arguments.py's vision group, added for every script: every log prints its defaults
        "img_h": 224,
        "img_w": 224,
        "patch_dim": 16,
    }
    for flag, values in flags_of(list(words)).items():
        name = dest(flag)
        if not values and flag.startswith("--no-") and flag not in STORE_FALSE:
            attrs[flag[5:].replace("-", "_")] = False  # argparse store_false: --no-x sets x
        elif not values:
            attrs[name] = flag not in STORE_FALSE
        elif flag in DTYPE_FLAGS:
            attrs[name] = TORCH_DTYPE.get(values[0], values[0])
        elif flag == "--attention-backend":
            attrs[name] = f"AttnBackend.{values[0]}"
        elif flag in ONE_WORD_LISTS:
            attrs[name] = layer_pattern(values[0], flag)
        elif flag == "--cuda-graph-modules":
            # _normalize_cuda_graph_modules_args: the members (a deprecated scope stays a word)
            members = CudaGraphModule.__members__
            attrs[name] = [members.get(v, v) for v in values if v != "full"]
        elif len(values) == 1 and flag != "--recompute-modules":
            attrs[name] = _scalar(values[0])
        else:
            attrs[name] = [_scalar(v) for v in values]
    model = 1
    for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size"):
        model *= int(attrs.get(name, 1))  # type: ignore[call-overload]
    model *= int(attrs.get("context_parallel_size", 1))  # type: ignore[call-overload]
    attrs["world_size"] = world_size
    attrs["data_parallel_size"] = world_size // model
    attrs["encoder_num_layers"] = attrs.get("num_layers")
    attrs["rank"] = 0
    if "--img-h" in words:  # pretrain_vlm.py's own arguments print too (add_vlm_extra_args)
        attrs.setdefault("disable_vision_class_token", False)
        attrs.setdefault("dataloader_seq_length", None)
    return attrs


def args_block(attrs: dict[str, object]) -> list[str]:
    """`_print_args('arguments', args)`, line for line."""
    lines = [f"  {name} {'.' * (48 - len(name))} {value}" for name, value in attrs.items()]
    return [
        "------------------------ arguments ------------------------",
        *sorted(lines, key=str.lower),
        "-------------------- end of arguments ---------------------",
    ]


@dataclass(frozen=True)
class Step:
    """One logged interval: its last iteration and the mean time per iteration over it."""

    iteration: int
    elapsed_ms: float
    tflops_per_gpu: float | None = None


def iteration_line(step: Step, train_iters: int, global_batch: int, loss: float = 8.0) -> str:
    """`training_log`'s stdout line (without the MoE and per-loss extras)."""
    stamp = START + datetime.timedelta(seconds=step.iteration)
    line = f" [{stamp.strftime('%Y-%m-%d %H:%M:%S.%f')}]"
    line += f" iteration {step.iteration:8d}/{train_iters:8d} |"
    line += f" consumed samples: {step.iteration * global_batch:12d} |"
    line += f" elapsed time per iteration (ms): {step.elapsed_ms:.1f} |"
    if step.tflops_per_gpu is not None:
        line += f" throughput per GPU (TFLOP/s/GPU): {step.tflops_per_gpu:.1f} |"
    line += f" learning rate: {3e-4:.6E} |"
    line += f" global batch size: {global_batch:5d} |"
    line += f" lm loss: {loss:.6E} |"
    line += f" loss scale: {1.0:.1f} |"
    line += f" grad norm: {1.234:.3f} |"
    line += f" number of skipped iterations: {0:3d} |"
    line += f" number of nan iterations: {0:3d} |"
    return line


def memory_line(rank: int, after: int, allocated_mib: float, max_allocated_mib: float) -> str:
    """`report_memory`'s line. Fixtures know allocated memory only: reserved is written as the
    allocated figure rounded up to the caching allocator's 2 MiB segments."""
    reserved = -(-max_allocated_mib // 2) * 2
    return (
        f"[Rank {rank}] (after {after} iterations) memory (MB)"
        f" | allocated: {allocated_mib:.2f} | max allocated: {max_allocated_mib:.2f}"
        f" | reserved: {reserved:.2f} | max reserved: {reserved:.2f}"
    )


def log_text(
    words: Sequence[str],
    world_size: int,
    steps: Sequence[Step],
    memory: tuple[int, int, float, float] | None = None,
    train_iters: int = 1000,
) -> str:
    """A whole log: start-up lines, the arguments block, the iteration lines, and one memory
    report (rank, after, allocated MiB, max allocated MiB) after the first logged line past
    iteration 1, where `training_log` prints it."""
    attrs = attributes(words, world_size)
    attrs["train_iters"] = train_iters
    gbs = int(attrs.get("global_batch_size", 1))  # type: ignore[call-overload]
    lines = [f"using world size: {world_size}", *args_block(attrs), "> building tokenizer ..."]
    for i, step in enumerate(steps):
        lines.append(iteration_line(step, train_iters, gbs))
        if memory is not None and i == min(1, len(steps) - 1):
            lines.append(memory_line(*memory))
    lines.append("[after training is done] datetime: 2026-01-05 10:00:00")
    return "\n".join(lines) + "\n"
