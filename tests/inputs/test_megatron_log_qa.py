"""The Megatron-LM log reader against what Megatron-LM d98e8a64 prints (QA, 2026-12): layer
patterns and enum members printed as Python lists, switches that store False into another
attribute, the padded vocabulary printed after the arguments block, and restarts in a log
without arguments blocks.

Oracles: the Megatron-LM source lines each test names (megatron/training/arguments.py,
megatron/core/transformer/enums.py, megatron/core/tokenizers/utils/build_tokenizer.py,
megatron/training/training.py), their printed forms written out by hand, and the same
arguments read as a command line (`planner.inputs.megatron_args`)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from paths import EXAMPLES, REPO

from planner.emit.megatron import arguments
from planner.inputs import megatron_args, megatron_log, megatron_log_args
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan, parse_plan
from planner.model import cost

sys.path.insert(0, str(REPO))
from benchmarks.megatron_logs import Step, args_block, attributes, iteration_line

GPU = "h100-sxm-80gb"
PLAN = EXAMPLES / "llama3.1-8b-h100.toml"  # tp 2 on 8 GPUs, 32 layers


def _text(words: list[str], world: int, changes: dict[str, Any]) -> str:
    """A log of the command line `words` whose arguments block prints `changes` as given (each
    value written as `_print_args` prints it: `str()` of the attribute)."""
    attrs = attributes(words, world)
    attrs.update(changes)
    steps = [Step(1, 9000.0)] + [Step(10 * k, 1500.0) for k in range(1, 8)]
    gbs = int(attrs["global_batch_size"])  # type: ignore[call-overload]
    lines = [*args_block(attrs), *(iteration_line(s, 100, gbs) for s in steps)]
    return "\n".join(lines) + "\n"


def _run(changes: dict[str, Any], plan: Path = PLAN) -> megatron_log.LogRun:
    p = load_plan(plan)
    text = _text(arguments(p).flat(), p.job.cluster.num_gpus, changes)
    (run,) = megatron_log.parse(text, Path("x.log")).runs
    return run


def _doc(run: megatron_log.LogRun, vocab_size: int | None = None) -> dict[str, Any]:
    n = megatron_log_args.world_size(run)
    assert n is not None
    return megatron_log_args.reading(run, GPU, n, vocab_size).doc


def _step(run: megatron_log.LogRun) -> float:
    plan = parse_plan(_doc(run), Path("x.log"))
    return cost.estimate(plan.job, plan.require_layout()).step_time_s


def test_a_window_pattern_prints_as_its_list_and_reads_as_the_pattern() -> None:
    """--window-attn-skip-freq is parsed by `moe_freq_type` (arguments.py :327-350), which
    evaluates a pattern to its list; `_print_args` prints the list (`'  {} {} {}'.format(arg,
    dots, getattr(args, arg))`, :1998). It was read as its first item (ONE_WORD_LISTS held
    only --moe-layer-freq): `[1, 1, 1, 0, ...]` became `--window-attn-skip-freq 1`, every
    layer windowed. Oracle: the flag's help (:2387-2393), "An integer N: ... one full
    attention layer after (N-1) SWA layers", so 4 is [1, 1, 1, 0] repeated."""
    window = {"window_size": "(1024, 0)"}
    pattern = [1, 1, 1, 0] * 8  # 32 layers
    as_list = _run({**window, "window_attn_skip_freq": pattern})
    assert str(pattern) in as_list.args["window_attn_skip_freq"]  # as Megatron prints it
    assert _doc(as_list)["model"]["window_attn_skip_freq"] == pattern
    as_int = _run({**window, "window_attn_skip_freq": 4})
    every_layer = _run({**window, "window_attn_skip_freq": [1] * 32})
    assert _step(as_list) == _step(as_int) != _step(every_layer)


def test_a_linear_attention_pattern_prints_as_its_list_and_reads_as_the_pattern(
    tmp_path: Path,
) -> None:
    """--linear-attention-freq is parsed by `la_freq_type` (arguments.py :352-375), the same
    evaluation; its help (:3579-3586): N is (N-1) LA layers for every SDPA layer, "where 1
    indicates an LA layer", so 4 is [1, 1, 1, 0] repeated. Qwen3-Next's 48 layers."""
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'[model]\nname = "qwen3-next-80b-a3b"\n[cluster]\ngpu = "{GPU}"\nnum_gpus = 64\n'
        "[training]\nseq_length = 4096\nglobal_batch_size = 64\n"
        "[parallel]\ntp = 2\npp = 4\nep = 8\nsequence_parallel = true\n"
    )
    pattern = [1, 1, 1, 0] * 12
    as_list = _run({"linear_attention_freq": pattern}, plan)
    assert _doc(as_list)["model"]["linear_attention_freq"] == pattern
    as_int = _run({"linear_attention_freq": 4}, plan)
    assert _step(as_list) == _step(as_int)


def test_the_fixture_writer_prints_what_validate_args_leaves() -> None:
    """benchmarks/megatron_logs.py printed `--window-attn-skip-freq ([1]*3+[0])*2` as the
    expression, which Megatron never prints (moe_freq_type / la_freq_type evaluate it,
    arguments.py :327-375), and `--cuda-graph-modules attn mlp` as strings, which
    `_normalize_cuda_graph_modules_args` (:263-294) turns into CudaGraphModule members
    (enums.py :61-73), printed by their repr in a list."""
    words = ["--window-attn-skip-freq", "([1]*3+[0])*2", "--linear-attention-freq", "[0]+[1]*3"]
    words += ["--moe-layer-freq", "3", "--cuda-graph-modules", "attn", "mlp"]
    printed = {line.split()[0]: line.split(" ", 4)[-1] for line in args_block(attributes(words, 8))}
    assert printed["window_attn_skip_freq"] == "[1, 1, 1, 0, 1, 1, 1, 0]"
    assert printed["linear_attention_freq"] == "[0, 1, 1, 1]"
    assert printed["moe_layer_freq"] == "3"
    assert printed["cuda_graph_modules"] == "[<CudaGraphModule.attn: 1>, <CudaGraphModule.mlp: 2>]"


def test_cuda_graph_modules_printed_as_enum_members_read_as_their_names() -> None:
    """`_normalize_cuda_graph_modules_args` (arguments.py :263-294) stores CudaGraphModule
    members (enums.py :61-73: attn = 1, mlp = 2); `_print_args` prints the list, whose str()
    is its items' repr. The reader refused it ("cannot read the list"). Oracle: the command
    line the block stands for, read by `megatron_args`."""
    changes = {
        "cuda_graph_impl": "transformer_engine",
        "cuda_graph_modules": "[<CudaGraphModule.attn: 1>, <CudaGraphModule.mlp: 2>]",
    }
    run = _run(changes)
    words = megatron_log_args.words(run)
    i = words.index("--cuda-graph-modules")
    assert words[i + 1 : i + 3] == ["attn", "mlp"]
    line = shlex.join(
        [
            *arguments(load_plan(PLAN)).flat(),
            *("--cuda-graph-impl", "transformer_engine", "--cuda-graph-modules", "attn", "mlp"),
        ]
    )
    expected = megatron_args.read(line, GPU, 8).doc["training"]
    got = _doc(run)["training"]
    for key in ("cuda_graphs", "cuda_graph_impl", "cuda_graph_modules"):
        assert got[key] == expected[key], key


# (flag, the attribute its action='store_false' stores, arguments.py d98e8a64 line)
STORE_FALSE_DESTS = [
    ("--no-gradient-accumulation-fusion", "gradient_accumulation_fusion", 2944),
    ("--no-use-layer-wise-param-layout", "use_layer_wise_param_layout", 3160),
    ("--muon-no-split-qkv", "muon_split_qkv", 2630),
    ("--no-overlap-p2p-communication", "overlap_p2p_comm", 3118),
    ("--no-position-embedding", "add_position_embedding", 2437),
]


@pytest.mark.parametrize("flag,attribute,line", STORE_FALSE_DESTS)
def test_a_switch_that_stores_false_elsewhere_is_rebuilt(
    flag: str, attribute: str, line: int
) -> None:
    """Each of these is `add_argument(flag, action='store_false', dest=attribute)` at its
    line of arguments.py: the block prints `attribute False` when the flag was given, `True`
    when not. The reader looked for `no_gradient_accumulation_fusion` (never printed), so the
    flag was never rebuilt."""
    assert megatron_log_args.dest(flag) == attribute
    assert flag in megatron_log_args.STORE_FALSE
    vpp = {"virtual_pipeline_model_parallel_size": 2}  # overlap_p2p_comm: see below
    given = megatron_log_args.words(_run({attribute: False, **vpp}))
    default = megatron_log_args.words(_run({attribute: True, **vpp}))
    assert flag in given and flag not in default


def test_overlap_p2p_comm_cleared_without_interleaving_is_no_flag() -> None:
    """validate_args sets `args.overlap_p2p_comm = False` when no virtual pipeline size is
    set (arguments.py :1010-1012): every non-interleaved log prints False, given or not."""
    words = megatron_log_args.words(_run({"overlap_p2p_comm": False}))
    assert "--no-overlap-p2p-communication" not in words


def test_an_fsdp2_log_is_read() -> None:
    """validate_args asserts `not args.gradient_accumulation_fusion` under
    --use-torch-fsdp2 (arguments.py :1040), so every FSDP2 log prints
    `gradient_accumulation_fusion False`: it was refused ("--no-gradient-accumulation-fusion:
    must be given")."""
    changes = {
        "use_torch_fsdp2": True,
        "use_distributed_optimizer": False,
        "gradient_accumulation_fusion": False,
        "ckpt_format": "torch_dist",
        "overlap_param_gather": False,
    }
    run = _run(changes)
    assert "--no-gradient-accumulation-fusion" in megatron_log_args.words(run)
    assert _doc(run)["parallel"]["zero_stage"] == 3


def test_muon_switches_are_read() -> None:
    """`--muon-no-split-qkv` (dest muon_split_qkv, :2630) and
    `--no-use-layer-wise-param-layout` (dest use_layer_wise_param_layout, :3160): the
    training table the same command line gives."""
    run = _run(
        {"optimizer": "dist_muon", "use_layer_wise_param_layout": False, "muon_split_qkv": False}
    )
    training = _doc(run)["training"]
    assert training["muon_whole_params"] is True and training["muon_split_qkv"] is False


PADDED = " > padded vocab (size: {}) with {} dummy tokens (new size: {})"
"""build_tokenizer.py :141-145 (`vocab_size_with_padding`): f' > padded vocab (size:
{orig_vocab_size}) with {after - orig_vocab_size} dummy tokens (new size: {after})'."""

HF = {
    "tokenizer_type": "HuggingFaceTokenizer",
    "tokenizer_model": "/models/llama3",
    "vocab_size": None,
    "padded_vocab_size": None,
}


def test_the_padded_vocab_line_gives_the_vocabulary_the_block_does_not() -> None:
    """An HF tokenizer's size is the tokenizer's own: `_print_args` runs at the end of
    validate_args (arguments.py :1985), before the tokenizer is built, so the block prints
    `padded_vocab_size None`, and `_set_padded_vocab_size` (build_tokenizer.py :149-152)
    prints the size after it. The reader asked for --vocab-size; it reads the line, the same
    vocabulary as `--vocab-size 128256` given."""
    p = load_plan(PLAN)
    text = _text(arguments(p).flat(), 8, HF)
    head, sep, tail = text.partition(" [")
    line = PADDED.format(128256, 0, 128256)
    (run,) = megatron_log.parse(f"{head}{line}\n{sep}{tail}", Path("x.log")).runs
    assert run.vocab is not None and (run.vocab.size, run.vocab.padded) == (128256, 128256)
    (without,) = megatron_log.parse(text, Path("x.log")).runs
    with pytest.raises(InputError, match="--vocab-size"):
        _doc(without)
    assert _doc(run)["model"] == _doc(without, 128256)["model"]
    # planner's own --vocab-size wins, as over a command line's
    assert _doc(run, 32000)["model"]["vocab_size"] == 32000


def _iterations(*numbers: int) -> list[str]:
    return [iteration_line(Step(n, 1500.0 if n > 10 else 9000.0), 100, 64) for n in numbers]


@pytest.mark.parametrize(
    "numbers,runs,kept",
    [
        # a restart from scratch (or an earlier checkpoint): iteration 1 after 20
        ((1, 10, 20, 1, 10, 20, 30, 40), [[1, 10, 20], [1, 10, 20, 30, 40]], 1),
        # the first run the longer: the restart is left out
        ((1, 10, 20, 30, 40, 1, 10, 20), [[1, 10, 20, 30, 40], [1, 10, 20]], 0),
        # resumed from the checkpoint of iteration 20: its first line, iteration 21, is off
        # the interval of 10 the lines 10, 20 show
        ((1, 10, 20, 21, 30, 40, 50), [[1, 10, 20], [21, 30, 40, 50]], 1),
        # a tie: the first
        ((1, 10, 20, 1, 10, 20), [[1, 10, 20], [1, 10, 20]], 0),
    ],
)
def test_restarts_without_arguments_blocks_are_runs_of_their_own(
    tmp_path: Path, numbers: tuple[int, ...], runs: list[list[int]], kept: int
) -> None:
    """Every start logs its first iteration (training.py :3539, `is_first_iteration`), whose
    interval timer is not reset (:3289, `should_reset = not is_first_iteration`): the first two
    lines of each start time start-up. A log without arguments blocks was one run, every
    restart's start-up in the median. Each start is now a run of the reader's, and the one with
    the most lines is measured, as a restart that prints its arguments again is (measured.py
    `_same_job`), the other said left out."""
    from planner.calibration.measured import read_runs

    text = "\n".join(["starting", *_iterations(*numbers)]) + "\n"
    log = megatron_log.parse(text, Path("x.log"))
    assert [[it.iteration for it in run.iterations] for run in log.runs] == runs
    path = tmp_path / "x.log"
    path.write_text(text)
    plan = tmp_path / "plan.toml"  # the example's layout at the lines' global batch, 64
    plan.write_text(PLAN.read_text().replace("global_batch_size = 128", "global_batch_size = 64"))
    notes: list[str] = []
    (measured,) = read_runs([path], "h100-sxm-80gb", 8, plan, None, notes)
    lines = [ln for ln in text.splitlines() if " iteration " in ln]
    first = lines.index(_iterations(runs[kept][0])[0], sum(map(len, runs[:kept]))) + 2
    assert measured.where == f"{path}:{first}"
    # the other start is said: left out, or (a tie, line for line the same) counted once
    assert sum("left out" in n or "again: once" in n for n in notes) == 1


@pytest.mark.parametrize("numbers", [(1, 10, 20, 30, 40), (1, 2, 3, 4, 5), (21, 30, 40, 50)])
def test_one_start_is_one_run(numbers: tuple[int, ...]) -> None:
    """Lines at the interval (or every iteration logged, `--log-interval 1`; or a resumed run
    alone) are one run."""
    text = "\n".join(_iterations(*numbers)) + "\n"
    log = megatron_log.parse(text, Path("x.log"))
    (run,) = log.runs
    assert [it.iteration for it in run.iterations] == list(numbers) and not log.notes
