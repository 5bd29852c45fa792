"""torchtitan Python configurations (b5bcd76c) QA found read as another job than torchtitan runs,
or accepted where torchtitan raises (planner.inputs.torchtitan_module, torchtitan_tables): a
record built otherwise than by literal keywords, an aliased baseline, a kw_only dataclass given
positions, values torchtitan's __post_init__ refuses, pipelining with accumulation (its
schedules, read as [torchtitan] gradient_accumulation_steps).

Oracles: torchtitan b5bcd76c's source, cited per case (`git show b5bcd76c:<path>` in the
pytorch/torchtitan mirror; tests/data/torchtitan_config_schema.json, its fields as
benchmarks/torchtitan_schema.py read them), and the same job spelt the way planner already reads
right (the read plans equal)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run
from paths import TESTS

from planner.inputs import torchtitan_config
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan
from planner.inputs.torchtitan_baselines import SECTION_CLASSES, TRAINER_FIELDS

HEAD = (
    "import dataclasses\n"
    "from torchtitan.components.quantization import Float8LinearConverter\n"
    "from torchtitan.config import CompileConfig, ParallelismConfig\n"
    "from torchtitan.models.llama3 import model_registry\n"
    "from torchtitan.models.llama3.config_registry import llama3_70b\n\n\n"
)


def _load(tmp_path: Path, body: str, head: str = HEAD, start: str = "llama3_70b()") -> Plan:
    path = tmp_path / "job.py"
    helper = "\n\ndef make(tp):\n    return ParallelismConfig(tensor_parallel_degree=tp)\n"
    path.write_text(f"{head}def job():\n    config = {start}\n{body}    return config\n{helper}")
    return torchtitan_config.load(Path(f"{path}:job"), "h100-sxm-80gb", 64)


def test_dataclasses_replace_is_the_fields_set_one_by_one(tmp_path: Path) -> None:
    """dataclasses.replace(config.parallelism, data_parallel_shard_degree=8) keeps the
    baseline's tp 8 (llama3_70b, config_registry.py:267-302); it was read as tp 1."""
    replaced = _load(
        tmp_path,
        "    config.parallelism = dataclasses.replace(config.parallelism,\n"
        "        data_parallel_shard_degree=8)\n",
    )
    fields = _load(tmp_path, "    config.parallelism.data_parallel_shard_degree = 8\n")
    assert replaced.require_layout() == fields.require_layout()
    assert (replaced.require_layout().tp, replaced.require_layout().dp) == (8, 8)
    with pytest.raises(InputError, match=r"job\.py:10: planner reads dataclasses\.replace"):
        _load(tmp_path, "    config.parallelism = dataclasses.replace(config.training)\n")


@pytest.mark.parametrize(
    ("body", "pattern"),
    [
        (  # a helper's result (the module docstring's promise): was tp 1
            "    config.parallelism = make(8)\n",
            r"job\.py:10: config\.parallelism: planner reads ParallelismConfig\(\.\.\.\) with "
            r"keyword arguments.*make\(8\)",
        ),
        (  # **{...}: was tp 1
            "    config.parallelism = ParallelismConfig(**{'tensor_parallel_degree': 8})\n",
            r"job\.py:10: config\.parallelism: .*ParallelismConfig\(\*\*",
        ),
        (  # another record's class in the section
            "    config.parallelism = CompileConfig(enable=True)\n",
            r"job\.py:10: config\.parallelism: planner reads ParallelismConfig",
        ),
        (  # configs.py:120 @dataclass(kw_only=True): TypeError in torchtitan; was ignored
            "    config.parallelism = ParallelismConfig(8)\n",
            r"job\.py:10: ParallelismConfig takes keyword arguments only",
        ),
        (  # trainer.py:69-116: Trainer.Config is slotted; was ignored
            "    config.bogus.x = 1\n",
            r"job\.py:10: config\.bogus: torchtitan b5bcd76c's Trainer\.Config has no such field",
        ),
        (  # configs.py:59-60; -8192 was read as the default -1
            "    config.training.num_tokens_per_train_step = -8192\n",
            r"config\.training\.num_tokens_per_train_step: -8192: torchtitan raises .*configs\.py",
        ),
        (  # configs.py:306-312 (CompileConfig.__post_init__); async TP was dropped silently
            "    config.compile = CompileConfig(enable=False, enable_async_tensor_parallel=True)\n",
            r"config\.compile\.enable_async_tensor_parallel: True without compile\.enable",
        ),
        (  # trainer.py:119-122
            "    config.debug.batch_invariant = True\n",
            r"config\.debug\.batch_invariant: True: torchtitan raises",
        ),
        (  # configs.py:265-269
            "    config.parallelism.context_parallel_load_balancer = ''\n",
            r'config\.parallelism\.context_parallel_load_balancer: "": torchtitan raises',
        ),
        (  # trainer.py:124-128
            "    config.parallelism.num_pp_microbatches = 0\n",
            r"config\.parallelism\.num_pp_microbatches: 0: torchtitan raises",
        ),
        (  # float8 on some decoder linears and not others: not modelled
            "    config.model_spec = model_registry('70B', converters=[\n"
            "        Float8LinearConverter.Config(filter_fqns=['lm_head', 'attention'])])\n",
            r'job\.py:11: config\.model_spec: converters: filter_fqns: "attention": planner',
        ),
        (  # a ModelSpec field set after the call: not read
            "    config.model_spec.converters = []\n",
            r"job\.py:10: config\.model_spec\.converters: planner reads the model_registry",
        ),
    ],
)
def test_what_is_not_read_exactly_or_torchtitan_raises_on_exits_2(
    tmp_path: Path, body: str, pattern: str
) -> None:
    with pytest.raises(InputError, match=pattern):
        _load(tmp_path, body)


@pytest.mark.parametrize(
    ("imports", "start", "arch"),
    [
        # the function imported, not its local name: was read as llama3_8b
        ("import llama3_405b as llama3_8b", "llama3_8b()", "llama3.1-405b"),
        # was refused, "planner knows the baselines ... (got ...llama3_8b)"
        ("import llama3_8b as base", "base()", "llama3.1-8b"),
    ],
)
def test_an_aliased_baseline_is_the_function_imported(
    tmp_path: Path, imports: str, start: str, arch: str
) -> None:
    head = f"from torchtitan.models.llama3.config_registry {imports}\n\n\n"
    assert _load(tmp_path, "", head, start).job.arch.name == arch


def test_a_baseline_from_another_models_registry_is_refused(tmp_path: Path) -> None:
    """torchtitan/models/qwen3/config_registry.py has no llama3_70b (ImportError there)."""
    head = "from torchtitan.models.qwen3.config_registry import llama3_70b\n\n\n"
    with pytest.raises(InputError, match=r"job\.py:5: torchtitan\.models\.qwen3\.config_registry "):
        _load(tmp_path, "", head)


def test_pipelining_with_accumulation_reads_its_schedules(tmp_path: Path) -> None:
    """trainer.py:856-899 runs num_tokens_per_train_step / (tokens x num_pp_microbatches x dp)
    groups, each one pp_schedule.step (:827) of num_pp_microbatches: 8 x 64 sequences at dp 2
    and 8 micro-batches is 4 schedules, read as `[torchtitan] gradient_accumulation_steps = 4`
    (it was refused)."""
    par = (
        "    config.parallelism = ParallelismConfig(data_parallel_shard_degree=2,\n"
        "        tensor_parallel_degree=8, pipeline_parallel_degree=4, num_pp_microbatches={})\n"
        "    config.training.disable_cuda_graphs = True\n"
        "    config.training.num_tokens_per_microbatch_per_dp_rank = 8192\n"
        "    config.training.num_tokens_per_train_step = 8192 * 64\n"
    )
    four = _load(tmp_path, par.format(8))
    lay = four.require_layout()
    assert (lay.pp, lay.dp, lay.micro_batch_size, lay.num_microbatches(64)) == (4, 2, 1, 32)
    assert four.job.global_batch_size == 64 and four.job.titan.gradient_accumulation_steps == 4
    one = _load(tmp_path, par.format(32))
    assert one.require_layout() == lay and one.job.titan.gradient_accumulation_steps == 1
    with pytest.raises(InputError, match=r"is not a multiple of the tokens of one accumulation"):
        _load(tmp_path, par.format(32).replace("8192 * 64", "8192 * 96"))


def test_a_field_of_a_whole_record_is_set_in_it(tmp_path: Path) -> None:
    """`config.loss.num_chunks = 4` sets ChunkedLossWrapper.Config's num_chunks (loss.py:542-544;
    the baselines' loss, default 8): it was dropped."""
    assert _load(tmp_path, "    config.loss.num_chunks = 4\n").job.titan.loss_chunks == 4


def test_float8_filter_fqns(tmp_path: Path) -> None:
    """Float8LinearConverter.Config filter_fqns, default [] (float8.py:61 at b5bcd76c), keeps a
    module bf16 where an entry is in its name (components/quantization/utils.py:16-30):
    llama3_405b's ["lm_head"] (config_registry.py:312-316) is planner's float8; without it the
    output layer is float8 too, said."""
    base = _load(tmp_path, "", HEAD.replace("llama3_70b", "llama3_405b"), "llama3_405b()")
    assert base.job.precision == "fp8" and base.inert == ()
    body = "    config.model_spec = model_registry('70B', converters=[{}])\n"
    ours = _load(tmp_path, body.format("Float8LinearConverter.Config(filter_fqns=['lm_head'])"))
    default = _load(tmp_path, body.format("Float8LinearConverter.Config()"))
    assert ours.job == default.job and ours.inert == ()
    assert [f for f, _ in default.inert] == ["config.model_spec.converters.filter_fqns"]


def test_deep_expressions_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ast.parse's own recursion limit (a 20,000-term sum) was an internal RecursionError."""
    path = tmp_path / "deep.py"
    term = " + ".join(["1"] * 20_000)
    path.write_text(f"{HEAD}def job():\n    config = llama3_70b()\n    x = {term}\n")
    args = ["check", "--torchtitan-config", str(path), "--gpu", "h100-sxm-80gb"]
    code, _, err = run([*args, "--num-gpus", "64"], capsys)
    assert code == 2 and "nested too deep to read" in err and "Traceback" not in err


def test_trainer_fields_and_section_classes_are_torchtitans() -> None:
    """TRAINER_FIELDS and SECTION_CLASSES against b5bcd76c's Trainer.Config (trainer.py:69-116)
    as benchmarks/torchtitan_schema.py read it (tests/data)."""
    schema = json.loads((TESTS / "data" / "torchtitan_config_schema.json").read_text())
    trainer = schema["modules"]["torchtitan.trainer"]["classes"]["Trainer.Config"]["fields"]
    assert set(trainer) == TRAINER_FIELDS
    for section, cls in SECTION_CLASSES.items():
        assert trainer[section] == cls
