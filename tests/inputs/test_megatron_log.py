"""Reading Megatron-LM logs: the three line formats, the arguments block back into flags, and
bad logs refused with their file and line.

Oracle: Megatron-LM d98e8a64's own format strings (cited in planner/inputs/megatron_log.py),
written out by hand below, and the plans the logs were written from (round trip)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from paths import DATA, EXAMPLES, REPO

from planner.emit.megatron import arguments
from planner.inputs import megatron_log, megatron_log_args
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan, parse_plan
from planner.model import cost, memory

sys.path.insert(0, str(REPO))
from benchmarks.megatron_logs import Step, args_block, log_text

LOGS = DATA / "megatron_logs"

# Written the way Megatron-LM prints them: _print_args pads each name with '.' * (48 - len);
# training_log's fields; report_memory's MB figures.
HAND = """\
0: some launcher line
------------------------ arguments ------------------------
  add_bias_linear ................................. False
  attention_backend ............................... AttnBackend.flash
  encoder_num_layers .............................. 4
  exp_avg_dtype ................................... torch.bfloat16
  fp8 ............................................. hybrid
  global_batch_size ............................... 16
  hidden_size ..................................... 1024
  moe_router_topk ................................. 2
  num_attention_heads ............................. 16
  num_experts ..................................... None
  num_layers ...................................... 4
  recompute_granularity ........................... selective
  recompute_modules ............................... ['core_attn', 'mlp']
  seq_length ...................................... 2048
  sequence_parallel ............................... True
  tensor_model_parallel_size ...................... 2
  world_size ...................................... 8
-------------------- end of arguments ---------------------
 [2026-01-05 09:00:01.000000] iteration        1/     100 | consumed samples:           16 | \
elapsed time per iteration (ms): 9000.0 | throughput per GPU (TFLOP/s/GPU): 20.5 | \
global batch size:    16 | lm loss: 1.000000E+01 | loss scale: 1.0 |
[Rank 0] (after 1 iterations) memory (MB) | allocated: 1000.50 | max allocated: 2000.25 | \
reserved: 2048.00 | max reserved: 2048.00
 [2026-01-05 09:00:02.000000] iteration       10/     100 | consumed samples:          160 | \
elapsed time per iteration (ms): 500.0 | global batch size:    16 |
"""


def test_the_three_formats_are_read_with_their_lines() -> None:
    log = megatron_log.parse(HAND, Path("hand.log"))
    (run,) = log.runs
    assert run.args_line == 2 and run.arg_lines["world_size"] == 19  # 17 arguments from line 3
    assert run.args["recompute_modules"] == "['core_attn', 'mlp']"
    first, second = run.iterations
    assert (first.line, first.iteration, first.elapsed_ms) == (21, 1, 9000.0)
    assert (first.tflops_per_gpu, first.global_batch) == (20.5, 16)
    assert (second.iteration, second.elapsed_ms, second.tflops_per_gpu) == (10, 500.0, None)
    (mem,) = run.memory
    assert (mem.line, mem.rank, mem.after, mem.max_allocated_mib) == (22, 0, 1, 2000.25)


def test_printed_arguments_become_the_flags_megatron_read() -> None:
    (run,) = megatron_log.parse(HAND, Path("hand.log")).runs
    words = megatron_log_args.words(run)
    # add_bias_linear False -> --disable-bias-linear (its argparse_meta); fp8 -> --fp8-format;
    # dtypes and enums back to the words the parser takes; a list, one word per item;
    # encoder_num_layers == num_layers is validate_args' copy; MoE defaults without experts
    # are dropped; True switches bare.
    assert "--disable-bias-linear" in words
    assert words[words.index("--fp8-format") + 1] == "hybrid"
    assert words[words.index("--exp-avg-dtype") + 1] == "bf16"
    assert words[words.index("--attention-backend") + 1] == "flash"
    i = words.index("--recompute-modules")
    assert words[i + 1 : i + 3] == ["core_attn", "mlp"]
    assert "--encoder-num-layers" not in words and "--moe-router-topk" not in words
    assert "--sequence-parallel" in words
    assert megatron_log_args.world_size(run) == 8


@pytest.mark.parametrize("value", ["-1", "1e3", "abc", "0", "9" * 5000])
def test_a_printed_world_size_that_is_no_count_is_named(value: str) -> None:
    """A printed world_size that is not a positive count is refused naming its line (19) and
    value (a fuzzer's: the message said none was printed, and 5,000 digits an internal error)."""
    dots = "." * 38
    text = HAND.replace(f"world_size {dots} 8", f"world_size {dots} {value}")
    run = megatron_log.parse(text, Path("hand.log")).runs[0]
    with pytest.raises(InputError, match=r"hand\.log:19: world_size: .*\(.*\)"):
        megatron_log_args.world_size(run)


def test_args_block_pads_like_megatron() -> None:
    # '  {} {} {}'.format(arg, '.' * (48 - len(arg)), value): 'num_layers' is 10 long -> 38 dots
    line = args_block({"num_layers": 4})[1]
    assert line == "  num_layers " + "." * 38 + " 4"


@pytest.mark.parametrize(
    "plan_file",
    [
        EXAMPLES / "llama3.1-8b-h100.toml",
        EXAMPLES / "deepseek-v3-h800.toml",
        EXAMPLES / "recipes" / "llama31-405b-pretrain-512gpu-h100-bf16.toml",
        EXAMPLES / "recipes" / "qwen3-30b-a3b-pretrain-16gpu-h100-fp8cs.toml",
    ],
    ids=lambda p: p.stem,
)
def test_a_plan_survives_its_own_log(plan_file: Path) -> None:
    """plan -> `launch`'s Megatron-LM arguments -> a log's arguments block -> plan: the same
    layout, step time and allocated memory per stage."""
    plan = load_plan(plan_file)
    job, layout = plan.job, plan.require_layout()
    text = log_text(arguments(plan).flat(), job.cluster.num_gpus, [Step(1, 1.0), Step(2, 1.0)])
    (run,) = megatron_log.parse(text, Path("x.log")).runs
    doc = megatron_log_args.reading(run, job.cluster.gpu.name, job.cluster.num_gpus).doc
    back = parse_plan(doc, Path("x.log"))
    assert back.require_layout() == layout
    assert cost.estimate(back.job, layout).step_time_s == cost.estimate(job, layout).step_time_s
    alloc = [s.allocated for s in memory.estimate(job, layout).stages]
    again = [s.allocated for s in memory.estimate(back.job, layout).stages]
    assert again == pytest.approx(alloc, rel=1e-12)  # summed in another order


def test_fixture_logs_read() -> None:
    for path in sorted(LOGS.glob("*.log")):
        (run,) = megatron_log.parse(path.read_text(), path).runs
        assert run.args and len(run.iterations) >= 5 and run.memory


BAD = [
    ("Epoch 1/10 - loss: 0.31\nEpoch 2/10 - loss: 0.29\n", "bad.log: not a Megatron-LM"),
    ("------------------------ arguments ------------------------\n  num_layers .... 2\n",
     "bad.log:1: the arguments block that starts here has no 'end of arguments'"),
    (" iteration        5/     100 | elapsed time per iteration (ms): nan | global batch size: 8 |",
     "bad.log:1: elapsed time per iteration (ms): nan"),
    (" iteration        5/     100 | elapsed time per iteration (ms): 12.0 | lm loss: nan |",
     "bad.log:1: lm loss: nan"),
    (" iteration        5/     100 | consumed samples:   40 | elapsed ti",
     "bad.log:1: iteration line without a whole 'elapsed time per iteration (ms)' field"),
    ("[Rank 3] (after 2 iterations) memory (MB) | allocated: 5.0 | max allocated: inf | "
     "reserved: 8.0 | max reserved: 8.0", "bad.log:1: max allocated: inf"),
    # a zero or negative peak divided the calibration's error (ZeroDivisionError, a fuzzer's);
    # a subnormal one (1e-320 MiB) wrote nan into the profile: MIN_MEMORY_MIB = 1
    ("[Rank 3] (after 2 iterations) memory (MB) | allocated: 5.0 | max allocated: 0.00 | "
     "reserved: 8.0 | max reserved: 8.0", "bad.log:1: max allocated: 0.00 MiB (must be at least"),
    ("[Rank 3] (after 2 iterations) memory (MB) | allocated: -5000.0 | max allocated: 9.0 | "
     "reserved: 8.0 | max reserved: 8.0", "bad.log:1: allocated: -5000.0 MiB (must be at least"),
    ("[Rank 3] (after 2 iterations) memory (MB) | allocated: 5.0 | max allocated: 1e-320 | "
     "reserved: 8.0 | max reserved: 8.0", "bad.log:1: max allocated: 1e-320 MiB (must be at least"),
    # 4.9e-324 ms passed "> 0" and made a 0.0 s step (ZeroDivisionError, log(0) in calibrate)
    (" iteration        5/     100 | elapsed time per iteration (ms): 4.9e-324 |",
     "bad.log:1: elapsed time per iteration (ms): 4.9e-324 (must be at least 0.001 ms)"),
    (" iteration        5/     100 | elapsed time per iteration (ms): 1" + "0" * 400 + " |",
     "bad.log:1: elapsed time per iteration (ms): 100000000000... (401 characters) (out of"),
    # cut inside the value (2059.2 read as 2: the median of the last lines halved), a fuzzer's
    (" iteration        3/     100 | consumed samples: 48 | elapsed time per iteration (ms): 2",
     "bad.log:1: iteration line without a whole 'elapsed time per iteration (ms)' field"),
    # counts past Python's 4,300-digit int() limit were internal errors
    (" iteration " + "9" * 5000 + "/     100 | elapsed time per iteration (ms): 5.0 |",
     "bad.log:1: iteration: 999999999999... (5,000 characters) (more digits than any count)"),
    ("[Rank " + "9" * 5000 + "] (after 2 iterations) memory (MB) | allocated: 5.0 | "
     "max allocated: 9.0 | reserved: 9.0 | max reserved: 9.0", "bad.log:1: Rank: 999999999999"),
]  # fmt: skip


@pytest.mark.parametrize("text,message", BAD, ids=range(len(BAD)))
def test_bad_logs_name_file_and_line(text: str, message: str) -> None:
    with pytest.raises(InputError) as info:
        megatron_log.parse(text + "\n", Path("bad.log"))  # whole lines, each with its newline
    assert str(info.value).startswith(message), str(info.value)


ITERATION = (
    " iteration {:8d}/     100 | elapsed time per iteration (ms): {} | global batch size: 8 |"
)
MEMORY = (
    "[Rank {}] (after 2 iterations) memory (MB) | allocated: 5000.0 | max allocated: {} | "
    "reserved: 9000.0 | max reserved: 9000.0"
)


def test_what_real_logs_add_around_the_lines() -> None:
    """A helper's sweep of real-world variants (QA, 2026-12-06): each used to fail a whole log or
    to read a wrong figure. A last line without its newline (a job still writing) was an error;
    it is left unread, with a note. Colour codes made numbers unreadable. A progress bar's
    carriage return split a line, so messages named a line grep -n does not. A memory report
    torn by another rank's (two [Rank N] on one line) gave rank 0 rank 8's peak."""
    lines = [ITERATION.format(i, 1000.0) for i in (1, 2, 3)]
    log = megatron_log.parse("\n".join(lines) + "\n" + ITERATION.format(4, "20"), Path("a.log"))
    assert [it.iteration for it in log.runs[0].iterations] == [1, 2, 3]
    assert log.notes == ["a.log:4: the last line has no newline (cut short): not read"]
    colour = "\x1b[32m" + ITERATION.format(5, "\x1b[1m1234.5\x1b[0m") + "\x1b[0m\n"
    (run,) = megatron_log.parse(colour, Path("c.log")).runs
    assert run.iterations[0].elapsed_ms == 1234.5
    bar = "50%|#####     | 5/10\r60%|######    | 6/10\n" + ITERATION.format(6, "nan") + "\n"
    with pytest.raises(InputError, match=r"^b\.log:2: elapsed time per iteration \(ms\): nan"):
        megatron_log.parse(bar, Path("b.log"))
    torn = MEMORY.format(0, "12000.0").replace(
        "max allocated", "[Rank 8] (after 2 itera max allocated"
    )
    text = torn + "\n" + MEMORY.format(4, "11000.0") + "\n"
    log = megatron_log.parse(text, Path("t.log"))
    assert [m.rank for m in log.runs[0].memory] == [4]
    assert log.notes == ["t.log:1: a memory report torn by another rank's output: not read"]


def test_the_vision_defaults_every_log_prints_are_no_llava() -> None:
    """Megatron-LM adds its vision arguments for every script, so every log prints img_h 224,
    img_w 224 and patch_dim 16 (the fixture writer prints them now too): a pretrain_gpt.py log
    was read as LLaVA (197 image tokens and a vision encoder as deep as the model: the step
    1.6 s -> 2.7 s on Llama 3.1 8B). LLaVA's only where pretrain_vlm.py's own arguments print
    beside them (disable_vision_class_token)."""
    plan = load_plan(EXAMPLES / "llama3.1-8b-h100.toml")
    n = plan.job.cluster.num_gpus
    text = log_text(arguments(plan).flat(), n, [Step(1, 1.0), Step(2, 1.0)])
    assert "img_h ........" in text  # printed, as Megatron-LM prints it
    (run,) = megatron_log.parse(text, Path("x.log")).runs
    assert "--img-h" not in megatron_log_args.words(run)
    vlm = text.replace("  img_h ...", "  disable_vision_class_token ....... False\n  img_h ...")
    (run,) = megatron_log.parse(vlm, Path("x.log")).runs
    assert "--img-h" in megatron_log_args.words(run)


def test_a_logging_prefix_is_not_an_argument() -> None:
    """Python logging's padded level (`| INFO     | `) before each argument line read every
    argument as one named INFO (QA, 2026-12-06); the dotted name is the argument."""
    block = [
        "------------------------ arguments ------------------------",
        "2026-01-01 10:00:00 | INFO     |   num_layers ...................................... 32",
        "2026-01-01 10:00:00 | INFO     |   hidden_size ..................................... 4096",
        "-------------------- end of arguments ---------------------",
    ]
    (run,) = megatron_log.parse("\n".join(block) + "\n", Path("p.log")).runs
    assert run.args == {"num_layers": "32", "hidden_size": "4096"}
