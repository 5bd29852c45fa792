"""torchtitan Python configurations read by `planner check --torchtitan-config FILE.py`
(planner.inputs.torchtitan_module): functions in the form torchtitan documents, a baseline and
field assignments, written by hand here. (Modules planner writes read back as their plans:
tests/emit/test_emit_torchtitan_module.py.)

Oracles: the baselines' values at pytorch/torchtitan b5bcd76c, cited per case
(torchtitan/models/llama3/config_registry.py:267-302: llama3_70b's 8 x 8192 tokens per
micro-batch per DP rank, context 8192, tensor parallel 8, FullAC), torchtitan's defaults
(torchtitan/config/configs.py: data_parallel_shard_degree -1 takes the GPUs left,
num_tokens_per_train_step -1 the per-rank tokens x dp), and arithmetic in the comments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run
from paths import EXAMPLES, TESTS

from planner.inputs import torchtitan_config
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan
from planner.inputs.torchtitan_baselines import DEFAULTS, SECTION_FIELDS, UNMODELLED

HEAD = (
    "from torchtitan.config import ParallelismConfig\n"
    "from torchtitan.distributed.activation_checkpoint import SelectiveAC\n"
    "from torchtitan.models.llama3 import model_registry\n"
    "from torchtitan.models.llama3.config_registry import llama3_70b\n\n\n"
    "def job():\n"
    "    config = llama3_70b()\n"
)


def _load(tmp_path: Path, body: str, num_gpus: int | None = 64, name: str = "job.py") -> Plan:
    path = tmp_path / name
    path.write_text(HEAD + body + "    return config\n")
    return torchtitan_config.load(path, "h100-sxm-80gb", num_gpus)


def test_a_baseline_alone_is_its_registry_values(tmp_path: Path) -> None:
    plan = _load(tmp_path, "")
    lay = plan.require_layout()
    # llama3_70b: tp 8 preset; 64 GPUs / 8 = 8 FSDP shards (-1: the rest); 8 x 8192 tokens at a
    # context of 8192 = micro-batch 8; the step's tokens unset (-1) = 8 sequences x dp 8 = 64
    assert (lay.tp, lay.dp, lay.pp, lay.micro_batch_size) == (8, 8, 1, 8)
    assert (plan.job.seq_length, plan.job.global_batch_size) == (8192, 64)
    assert lay.recompute == "full" and lay.zero_stage == 3
    assert plan.job.arch.name == "llama3.1-70b" and plan.job.precision == "bf16"
    assert plan.job.titan.loss_chunks == 8  # ChunkedLossWrapper at its default num_chunks


def test_fields_set_over_the_baseline(tmp_path: Path) -> None:
    body = (
        "    config.parallelism.tensor_parallel_degree = 4\n"
        "    config.training.num_tokens_per_microbatch_per_dp_rank = 2 * 8192\n"
        "    config.training.num_tokens_per_train_step = 256 * 8192\n"
        "    config.activation_checkpoint = SelectiveAC.Config()\n"
    )
    plan = _load(tmp_path, body)
    lay = plan.require_layout()
    # tp 4 over the preset's 8: 64 / 4 = 16 shards; 2 sequences a micro-batch; 256 a step
    assert (lay.tp, lay.dp, lay.micro_batch_size, plan.job.global_batch_size) == (4, 16, 2, 256)
    assert lay.recompute == "selective"


def test_a_whole_record_replaces_the_baselines_presets(tmp_path: Path) -> None:
    """ParallelismConfig(...) is the record as written: the baseline's tp 8 is gone (tp 1)."""
    body = (
        "    config.parallelism = ParallelismConfig(pipeline_parallel_degree=4,\n"
        "        num_pp_microbatches=8, pipeline_parallel_schedule='1F1B')\n"
        "    config.training.num_tokens_per_microbatch_per_dp_rank = 8192\n"
    )
    # torchtitan refuses CUDA graphs (on by default) with pipelining (trainer.py:172-176)
    with pytest.raises(InputError, match=r"disable_cuda_graphs: False .* pipeline parallelism"):
        _load(tmp_path, body)
    plan = _load(tmp_path, body + "    config.training.disable_cuda_graphs = True\n")
    lay = plan.require_layout()
    # 64 / pp 4 = 16 shards; 8 micro-batches of one sequence per rank, x 16 = 128 a step
    assert (lay.tp, lay.pp, lay.dp, lay.micro_batch_size) == (1, 4, 16, 1)
    assert plan.job.global_batch_size == 128


def test_names_and_converters(tmp_path: Path) -> None:
    head = "from torchtitan.components.quantization import Float8LinearConverter\n"
    body = (
        "    seq = 4096\n"
        "    config.model_spec = model_registry('70B', converters=[\n"
        "        Float8LinearConverter.Config(recipe_name='rowwise_with_gw_hp')])\n"
        "    config.training.max_context_length = seq\n"
        "    config.training.num_tokens_per_microbatch_per_dp_rank = 4 * seq\n"
    )
    path = tmp_path / "fp8.py"
    path.write_text(head + HEAD + body + "    return config\n")
    plan = torchtitan_config.load(path, "h100-sxm-80gb", 64)
    assert plan.job.precision == "fp8" and plan.job.fp8_recipe == "rowwise_with_gw_hp"
    assert plan.job.seq_length == 4096 and plan.require_layout().micro_batch_size == 4


def test_torchtitans_own_form_returns_the_record(tmp_path: Path) -> None:
    """A function that returns Trainer.Config(...) (the baselines' own form) and one that
    returns another config function's result; an assert is read past."""
    path = tmp_path / "own.py"
    path.write_text(
        "from torchtitan.components.loss import ChunkedLossWrapper\n"
        "from torchtitan.config import ParallelismConfig, TrainingConfig\n"
        "from torchtitan.distributed.activation_checkpoint import FullAC\n"
        "from torchtitan.models.qwen3 import model_registry\n"
        "from torchtitan.trainer import Trainer\n\n\n"
        "def base():\n"
        "    spec = model_registry('30B-A3B')\n"
        "    return Trainer.Config(\n"
        "        model_spec=spec,\n"
        "        loss=ChunkedLossWrapper.Config(num_chunks=4),\n"
        "        training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank=2 * 4096,\n"
        "            max_context_length=4096, num_tokens_per_train_step=512 * 4096,\n"
        "            disable_cuda_graphs=True),\n"
        "        parallelism=ParallelismConfig(expert_parallel_degree=8),\n"
        "        activation_checkpoint=FullAC.Config(),\n"
        "    )\n\n\n"
        "def job():\n"
        "    assert True\n"
        "    return base()\n"
    )
    plan = torchtitan_config.load(Path(f"{path}:job"), "h100-sxm-80gb", 64)
    lay = plan.require_layout()
    # 2 x 4096 tokens at 4096 = micro-batch 2; 512 sequences a step; 64 GPUs all FSDP shards
    assert plan.job.arch.name == "qwen3-30b-a3b" and plan.job.global_batch_size == 512
    assert (lay.dp, lay.ep, lay.micro_batch_size, lay.recompute) == (64, 8, 2, "full")
    assert plan.job.titan.loss_chunks == 4
    no_loss = path.read_text().replace(
        "        loss=ChunkedLossWrapper.Config(num_chunks=4),\n", ""
    )
    path.write_text(no_loss)
    with pytest.raises(InputError, match=r"BaseLoss.Config \(torchtitan's abstract default"):
        torchtitan_config.load(Path(f"{path}:job"), "h100-sxm-80gb", 64)


def test_a_baseline_through_its_module(tmp_path: Path) -> None:
    """`from torchtitan.models.llama3 import config_registry` then config_registry.llama3_70b():
    the same baseline as importing the function."""
    path = tmp_path / "via.py"
    path.write_text(
        "from torchtitan.models.llama3 import config_registry\n\n\n"
        "def job():\n    config = config_registry.llama3_70b()\n    return config\n"
    )
    lay = torchtitan_config.load(path, "h100-sxm-80gb", 64).require_layout()
    assert (lay.tp, lay.dp, lay.micro_batch_size) == (8, 8, 8)  # as the baseline alone


def test_what_the_plan_does_not_need_is_not_evaluated(tmp_path: Path) -> None:
    """An optimizer built from the environment is no plan field: read past, not refused."""
    body = "    config.optimizer = default_adamw(lr=float(os.environ['LR']))\n"
    assert _load(tmp_path, body).require_layout().tp == 8


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (
            "    config.parallelism.tensor_parallel_degree = int(os.environ['TP'])\n",
            r"job\.py:9: config\.parallelism\.tensor_parallel_degree: planner does not evaluate "
            r"int\(os\.environ\['TP'\]\)",
        ),
        (  # one line: a block is named by its first (flux's `if ...: raise` spanned three)
            "    for i in range(2):\n        pass\n",
            r"job\.py:9: planner reads assignments only: for i in range\(2\): \.\.\.$",
        ),
        ("    other = 1\n", None),
        ("    config.training.max_context_length = 1000\n", r"multiples of max_context_length"),
        ("    config.activation_checkpoint = MemoryBudgetAC.Config()\n", r"SelectiveAC"),
        (
            "    config.model_spec = model_registry('70B', moe_comm_backend='hybridep')\n",
            r"moe_comm_backend: planner models torchtitan's standard and deepep",
        ),
        ("    config.parallelism.tensor_parallel_degree = 'eight'\n", r"expected int"),
        ("    kw = {}\n    return Trainer.Config(**kw)\n", r"planner does not evaluate"),
        (  # an e347b1e5 TOML name: torchtitan's slotted dataclass has no such field now
            "    config.training.local_batch_size = 8\n",
            r"config\.training\.local_batch_size: torchtitan b5bcd76c has no such field",
        ),
        (
            "    config.parallelism = ParallelismConfig(tensor_parallel=2)\n",
            r"config\.parallelism\.tensor_parallel: torchtitan b5bcd76c has no such field",
        ),
        (
            "    config.parallelism.enable_sequence_parallel = False\n",
            r"enable_sequence_parallel: false: planner models torchtitan at its default here",
        ),
        (
            "    config.training.enable_cpu_offload = True\n",
            r"enable_cpu_offload: true: planner models torchtitan at its default here",
        ),
        ("    config = Trainer.Config(**kw)\n", r"job\.py:9: planner does not evaluate"),
    ],
)
def test_what_is_not_read_exits_2_naming_it(tmp_path: Path, body: str, match: str | None) -> None:
    if match is None:  # a local name bound and unused: read
        assert _load(tmp_path, body).require_layout().tp == 8
        return
    with pytest.raises(InputError, match=match):
        _load(tmp_path, body)


def test_function_choice_and_shape(tmp_path: Path) -> None:
    two = HEAD + "    return config\n\n\ndef other():\n    config = llama3_70b()\n"
    path = tmp_path / "two.py"
    path.write_text(two + "    config.parallelism.tensor_parallel_degree = 2\n    return config\n")
    with pytest.raises(InputError, match=r"which config function\? give FILE:FUNCTION"):
        torchtitan_config.load(path, "h100-sxm-80gb", 64)
    chosen = torchtitan_config.load(tmp_path / "two.py:other", "h100-sxm-80gb", 64)
    assert chosen.require_layout().tp == 2
    with pytest.raises(InputError, match=r"no function 'third'"):
        torchtitan_config.load(tmp_path / "two.py:third", "h100-sxm-80gb", 64)
    bad = tmp_path / "bad.py"
    bad.write_text("def job():\n    config = llama3_70b(\n")
    with pytest.raises(InputError, match=r"bad\.py: not a Python module"):
        torchtitan_config.load(bad, "h100-sxm-80gb", 64)
    unknown = tmp_path / "unknown.py"
    unknown.write_text(
        "from torchtitan.models.llama3.config_registry import llama3_1b\n\n"
        "def job():\n    config = llama3_1b()\n    return config\n"
    )
    with pytest.raises(InputError, match=r"unknown\.py:4: planner knows the baselines"):
        torchtitan_config.load(unknown, "h100-sxm-80gb", 64)


def test_check_reads_a_module_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.py"
    path.write_text(HEAD + "    return config\n")
    code, out, _ = run(
        ["check", "--torchtitan-config", str(path), "--gpu", "h100-sxm-80gb", "--num-gpus", "64"],
        capsys,
    )
    assert code in (0, 1) and "llama3.1-70b on 64 x h100-sxm-80gb" in out
    code, _, err = run(["check", "--torchtitan-config", str(tmp_path / "none.py")], capsys)
    assert code == 2 and "none.py: no such file" in err  # files.read_file's, as for a plan
    args = ["--torchtitan-config", str(path), "--gpu", "h100-sxm-80gb", "--num-gpus", "64"]
    code, out, err = run(["explain", *args, "--json"], capsys)
    assert code == 0 and json.loads(out)["parallel"]["tp"] == 8  # the baseline's preset
    assert "torchtitan e347b1e5's with this configuration's loss" in json.loads(out)["notes"][0]
    assert "planner: note:" in err
    code, _, err = run(["explain", "plan.toml", *args], capsys)
    assert code == 2 and "give one of a plan file" in err


def test_the_bundled_example_reads() -> None:
    """examples/torchtitan_qwen3_30b_a3b.py: qwen3_30b_a3b's FullAC (config_registry.py:305-337)
    under the example's own settings: ep 8 over the 64 FSDP shards (-1: the GPUs left), two
    4,096-token sequences a micro-batch, 512 a step, DeepEP, the loss in 8 chunks."""
    plan = torchtitan_config.load(EXAMPLES / "torchtitan_qwen3_30b_a3b.py", "h100-sxm-80gb", 64)
    lay = plan.require_layout()
    assert (lay.tp, lay.dp, lay.ep, lay.expert_tp, lay.micro_batch_size) == (1, 64, 8, 1, 2)
    assert (plan.job.seq_length, plan.job.global_batch_size) == (4096, 512)
    assert lay.recompute == "full" and lay.moe_token_dispatcher_type == "flex"
    assert plan.job.titan.loss_chunks == 8 and plan.job.arch.name == "qwen3-30b-a3b"


def test_the_section_fields_are_torchtitans() -> None:
    """SECTION_FIELDS (what the reader accepts) against torchtitan's classes as
    benchmarks/torchtitan_schema.py read them from b5bcd76c (tests/data)."""
    schema = json.loads((TESTS / "data" / "torchtitan_config_schema.json").read_text())
    classes = schema["modules"]["torchtitan.config.configs"]["classes"]
    names = {
        "training": "TrainingConfig",
        "parallelism": "ParallelismConfig",
        "compile": "CompileConfig",
        "debug": "DebugConfig",
    }
    for section, cls in names.items():
        assert SECTION_FIELDS[section] == set(classes[cls]["fields"]), section
    for section, name in UNMODELLED:
        assert name in SECTION_FIELDS[section] and (section, name) in DEFAULTS
