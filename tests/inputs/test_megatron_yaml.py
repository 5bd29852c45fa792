"""Megatron-LM's test configuration files (`model_config.yaml`) read by
`planner check --megatron-args FILE`.

Oracle: the word-building rules of Megatron-LM's runner (d98e8a64,
tests/functional_tests/shell_test_utils/_run_training.sh), applied by hand in each test's
comments: a YAML true is the bare flag; a value is trimmed and unquoted as xargs does; `( )`
keeps one word, `[ ]` gives its words without the brackets, a value with a space or `|` one
word; an empty string drops the entry; a NeMo test's keys become key=value words. And planner's
own reading of the same words as a command line: a configuration must give the plan its line
gives. benchmarks/functional_configs.py checks the reader against the words an independent yq and
bash extraction stored for all 226 usable cases (226 equal)."""

from __future__ import annotations

import contextlib
import random
import shlex
from pathlib import Path

import pytest
from cli_run import run

from planner.inputs import megatron_args, megatron_yaml
from planner.inputs.errors import InputError

CONFIG = """\
ENV_VARS:
  CUDA_DEVICE_MAX_CONNECTIONS: 1
  PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True
  LAYERS: 4
base: &base
  --hidden-size: 1024
  --num-attention-heads: 16
MODEL_ARGS:
  <<: *base
  --num-layers: ${LAYERS}
  --num-attention-heads: 8
  --seq-length: 4096
  --max-position-embeddings: 4096
  --micro-batch-size: 1
  --global-batch-size: 8
  --lr: .01
  --min-lr: 1e-5
  --bf16: true
  --use-distributed-optimizer: True
  --data-path: ${DATA_PATH}/my-gpt3_00_text_document
  --split: 949,50,1
  --moe-layer-freq: ([0]*1+[1]*3)
  --data-cache-path: ""
  --log-interval: "  1 "
  --wandb-exp-name: "a   b"
  --stop-words: '"the"'
  --tensor-model-parallel-size: 2
  --tensor-model-parallel-size: 4
  --ranks: "[0 1 2]"
TEST_TYPE: regular
"""
# By hand, in the file's order (the merged keys first; MODEL_ARGS' own --num-attention-heads
# overrides the merged one, which is dropped):
WORDS = [
    "pretrain_gpt.py",
    "--hidden-size",
    "1024",  # merged from &base
    "--num-layers",
    "4",  # ${LAYERS} from ENV_VARS
    "--num-attention-heads",
    "8",
    "--seq-length",
    "4096",
    "--max-position-embeddings",
    "4096",
    "--micro-batch-size",
    "1",
    "--global-batch-size",
    "8",
    "--lr",
    ".01",  # the YAML text, not a float's spelling
    "--min-lr",
    "1e-5",
    "--bf16",  # true: the bare flag
    "--use-distributed-optimizer",  # True is a YAML true too
    "--data-path",
    "${DATA_PATH}/my-gpt3_00_text_document",  # the runner's path: kept
    "--split",
    "949,50,1",
    "--moe-layer-freq",
    "([0]*1+[1]*3)",  # ( ): one word
    # --data-cache-path "": dropped
    "--log-interval",
    "1",  # xargs trims
    "--wandb-exp-name",
    "a b",  # xargs: one space between words; a space: one word
    "--stop-words",
    "the",  # xargs drops the quotes
    "--tensor-model-parallel-size",
    "2",
    "--tensor-model-parallel-size",
    "4",  # both kept: argparse takes the last
    "--ranks",
    "0",
    "1",
    "2",  # [ ]: the words, brackets stripped
]


def test_model_args_become_the_runners_words() -> None:
    config = megatron_yaml.read(CONFIG, "model_config.yaml")
    assert config.launch.words == WORDS
    assert config.launch.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert config.launch.world is None  # the recipe's, not the file's
    assert "pretrain_gpt.py (assumed" in config.note


def test_a_configuration_reads_as_its_command_line() -> None:
    text = CONFIG.replace('  --ranks: "[0 1 2]"\n', "").replace("  --moe-layer-freq", "  #")
    # --stop-words is an inference script's: a line naming pretrain_gpt.py exits 2 on it
    # (pretrain_gpt.py:525-528, arguments.py:129-132), a configuration whose script planner
    # guesses lists it (test_megatron_entry_parser.py)
    text = text.replace("  --stop-words: '\"the\"'\n", "")
    words = megatron_yaml.read(text, "model_config.yaml").launch.words
    line = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True " + shlex.join(words)
    from_yaml = megatron_args.read(text, "h100-sxm-80gb", 8, "model_config.yaml")
    from_line = megatron_args.read(line, "h100-sxm-80gb", 8, "model_config.yaml")
    assert from_yaml.doc == from_line.doc
    assert from_yaml.doc["parallel"]["tp"] == 4  # the later of the two
    assert from_yaml.doc["training"]["expandable_segments"] is True  # ENV_VARS: the environment
    assert from_yaml.notes[0].startswith("Megatron-LM test configuration")


@pytest.mark.parametrize(
    ("family", "script", "vocab"),
    [
        ("bert", "pretrain_bert.py", "BertWordPieceLowerCase"),
        ("gpt", "pretrain_gpt.py", "GPT2BPETokenizer"),
        ("moe", "pretrain_gpt.py", "GPT2BPETokenizer"),
    ],
)
def test_the_family_folder_names_the_script(family: str, script: str, vocab: str) -> None:
    where = f"Megatron-LM/tests/functional_tests/test_cases/{family}/case/model_config.yaml"
    text = "MODEL_ARGS:\n  --num-layers: 2\n  --hidden-size: 256\n  --num-attention-heads: 4\n"
    text += "  --seq-length: 512\n  --micro-batch-size: 1\n  --global-batch-size: 8\n"
    assert megatron_yaml.read(text, where).launch.words[0] == script
    reading = megatron_args.read(text, "h100-sxm-80gb", 8, where)
    assert any(n.startswith(f"vocabulary: {vocab}") for n in reading.notes)


def test_an_inference_test_runs_a_trained_model() -> None:
    text = "MODE: inference\nMODEL_ARGS:\n  --num-layers: 2\n  --num-tokens-to-generate: 30\n"
    words = megatron_yaml.read(text, "model_config.yaml").launch.words
    assert words[0].endswith("gpt_dynamic_inference.py")


def test_a_nemo_test_gives_key_value_overrides() -> None:
    text = (
        "MODEL_ARGS:\n  trainer.devices: 8\n  trainer.strategy.sequence_parallel: true\n"
        "  data.seq_length: 2048\n"
    )
    words = megatron_yaml.read(text, "model_config.yaml").launch.words
    # no script word: the recipe's `nemo llm pretrain --factory NAME` names the model
    assert words == [
        "trainer.devices=8",
        "trainer.strategy.sequence_parallel",
        "data.seq_length=2048",
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("MODEL_ARGS:\n  --num-layers: [2, 3]\n", "MODEL_ARGS.--num-layers: a YAML list"),
        ("MODEL_ARGS: 3\n", "MODEL_ARGS: expected a mapping"),
        ("MODEL_ARGS:\n  --a: 1\n --b: 2\n", "not valid YAML (line 3, column 2)"),
        ('MODEL_ARGS:\n  --stop-words: "\'the"\n', "an unmatched quote"),
        ("MODEL_ARGS:\n  <<: 3\n", "'<<': merges a mapping"),
        ("MODEL_ARGS: &a\n  <<: *a\n  --num-layers: 2\n", "a mapping merges itself"),
        ("MODEL_ARGS: {}\n", "MODEL_ARGS: holds no flags"),
        # the runner (_run_training.sh) writes `--flag false`, which argparse stops on (planner
        # read the switch as given: the distributed optimizer on)
        (
            "MODEL_ARGS:\n  --use-distributed-optimizer: false\n",
            "MODEL_ARGS.--use-distributed-optimizer: false: the runner passes",
        ),
    ],
)
def test_bad_configurations_are_named(text: str, says: str) -> None:
    with pytest.raises(InputError) as e:
        megatron_yaml.read(text, "cfg.yaml")
    assert str(e.value).startswith("cfg.yaml: ") and says in str(e.value)


def test_check_reads_a_configuration_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "model_config.yaml"
    path.write_text(CONFIG.replace("  --moe-layer-freq: ([0]*1+[1]*3)\n", ""))
    args = ["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb"]
    code, out, err = run([*args, "--num-gpus", "8"], capsys)
    assert code == 0, err
    assert "tp4 pp1 dp2" in out
    assert "Megatron-LM test configuration" in err
    # no launcher in the file: the GPU count is asked for, by name
    code, out, err = run(args, capsys)
    assert code == 2 and out == ""
    assert "--num-gpus" in err and "test configuration does not hold its GPU count" in err
    assert "Traceback" not in err


def test_any_configuration_text_reads_or_says_why() -> None:
    """Bad input never a traceback: 2,000 random configurations (seeded), entry lines of flags
    the reader reads with values over YAML's and the runner's special characters, anchors and
    merges, each read to a plan or raise InputError."""
    rng = random.Random(5)
    keys = ["--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length"]
    keys += ["--micro-batch-size", "--global-batch-size", "--tensor-model-parallel-size"]
    keys += ["--num-experts", "--moe-layer-freq", "--bf16", "--recompute-granularity", "<<"]
    chars = [*"ab ${}()[]\"'|&#=-*?!@:,%/09", "true", "null", "~", "*a", "8", "2", "4096", "${X}"]
    for _ in range(2000):
        lines = ["ENV_VARS:", "  X: 2", "base: &a", "  --hidden-size: 256", "MODEL_ARGS:"]
        for _ in range(rng.randint(0, 14)):
            value = "".join(rng.choice(chars) for _ in range(rng.randint(0, 4)))
            if rng.random() < 0.7:  # quoted: the special characters reach the runner's rules
                value = "'" + value.replace("'", "''") + "'"
            lines.append(f"  {rng.choice(keys)}: {value}")
        with contextlib.suppress(InputError):
            megatron_args.read("\n".join(lines) + "\n", "h100-sxm-80gb", 8, "cfg.yaml")


def test_a_test_case_folder_reads_its_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = tmp_path / "test_cases" / "bert" / "bert_case"
    case.mkdir(parents=True)
    (case / "model_config.yaml").write_text(
        "MODEL_ARGS:\n  --num-layers: 2\n  --hidden-size: 256\n  --num-attention-heads: 4\n"
        "  --seq-length: 512\n  --micro-batch-size: 1\n  --global-batch-size: 8\n"
    )
    args = ["check", "--megatron-args", str(case), "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    code, _, err = run(args, capsys)
    assert code == 0, err
    # the folder names the family, so BERT's script and its default tokenizer (section 12)
    assert "after pretrain_bert.py" in err and "BertWordPieceLowerCase" in err
    code, _, err = run([*args[:2], str(tmp_path), *args[3:]], capsys)  # no configuration there
    assert code == 2 and "is a directory, expected a file" in err


@pytest.mark.parametrize(
    "text",
    [
        "MODEL_ARGS:\n  --x: " + "[" * 5000 + "]" * 5000 + "\n",
        "MODEL_ARGS:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 3000)),
    ],
)
def test_pathological_nesting_says_why(text: str) -> None:
    """YAML nested beyond Python's recursion limit (PyYAML composes recursively) is bad input
    (exit 2), not a traceback."""
    with pytest.raises(InputError, match="nests too deeply to read"):
        megatron_args.read(text, "h100-sxm-80gb", 8, "cfg.yaml")
