"""torchtitan Python configurations (b5bcd76c) QA found read otherwise than torchtitan runs them:
a field set on `config.activation_checkpoint` or `config.checkpoint` that the record's class
lacks was dropped (`config.activation_checkpoint.mode = "none"` planned FullAC's 15.4 GiB where
torchtitan raises AttributeError); a value not evaluated showed as planner's Record or Unread
in the message; a `--torchtitan-config` file was read without the 16 MiB cap. A pipe with a
writer (bash's process substitution) is read as any file is: a named pipe no program writes waits
as `cat` would (open(2)), which planner leaves as it is.

Oracles: torchtitan b5bcd76c's source (`git show b5bcd76c:<path>` in the pytorch/torchtitan
mirror): every config class is `@dataclass(kw_only=True, slots=True)`, so a name the class lacks
raises AttributeError when set and TypeError as a keyword; the fields are
torchtitan/distributed/activation_checkpoint.py:120-140 (ActivationCheckpointing.Config:
preserve_rng_state, determinism_check, debug), :169-171 (FullAC.Config: none of its own),
:194-207 (SelectiveAC.Config: force_recompute_mm_shapes_by_fqns), :296-313
(MemoryBudgetAC.Config: memory_budget, visualize_memory_budget_pareto);
components/checkpointer/base.py:274-325 and dcp.py:135-138 (CheckpointManager.Config, the
default, trainer.py:105-107); components/loss.py:542-548 (ChunkedLossWrapper.Config) and
:277-280 (CrossEntropyLoss.Config); and tests/data/torchtitan_config_schema.json, the same
classes as benchmarks/torchtitan_schema.py read them. The plans read when a field planner does
not model is set are compared with the plan of the configuration without it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from paths import TESTS

from planner.inputs import files, torchtitan_config
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan
from planner.inputs.torchtitan_baselines import RECORD_FIELDS

HEAD = (
    "from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss\n"
    "from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC\n"
    "from torchtitan.models.llama3 import model_registry\n"
    "from torchtitan.models.llama3.config_registry import llama3_70b, llama3_8b\n\n\n"
    "def job():\n"
)
"""`def job():` is line 7, `config = ...` line 8: `body` starts at line 9."""


def _load(tmp_path: Path, body: str, start: str = "llama3_70b()") -> Plan:
    path = tmp_path / "job.py"
    path.write_text(f"{HEAD}    config = {start}\n{body}    return config\n")
    return torchtitan_config.load(path, "h100-sxm-80gb", 64)


@pytest.mark.parametrize(
    ("start", "body", "pattern"),
    [
        (  # the QA repro: FullAC.Config (llama3_70b's, config_registry.py:267-302) has no mode
            "llama3_70b()",
            '    config.activation_checkpoint.mode = "none"\n',
            r"job\.py:9: config\.activation_checkpoint\.mode: torchtitan b5bcd76c has no such "
            r"field \(FullAC\.Config",
        ),
        (  # memory_budget is MemoryBudgetAC.Config's (:296-313), not SelectiveAC.Config's
            "llama3_8b()",
            "    config.activation_checkpoint.memory_budget = 0.1\n",
            r"job\.py:9: config\.activation_checkpoint\.memory_budget: .* no such field "
            r"\(SelectiveAC\.Config",
        ),
        (
            "llama3_8b()",
            "    config.activation_checkpoint = FullAC.Config()\n"
            "    config.activation_checkpoint.mode = 'none'\n",
            r"job\.py:10: config\.activation_checkpoint\.mode: .* no such field",
        ),
        (  # the same name as a keyword: the kw_only dataclass raises TypeError
            "llama3_8b()",
            '    config.activation_checkpoint = FullAC.Config(mode="none")\n',
            r"job\.py:9: config\.activation_checkpoint\.mode: .* no such field",
        ),
        (  # the default record (trainer.py:108-110, SelectiveAC.Config) when none is set
            "Trainer.Config(model_spec=model_registry('8B'))",
            "    config.activation_checkpoint.memory_budget = 0.1\n",
            r"job\.py:9: config\.activation_checkpoint\.memory_budget: .* no such field",
        ),
        (  # None has no fields: AttributeError
            "llama3_8b()",
            "    config.activation_checkpoint = None\n"
            "    config.activation_checkpoint.preserve_rng_state = False\n",
            r"job\.py:10: config\.activation_checkpoint\.preserve_rng_state: "
            r"config\.activation_checkpoint is None here",
        ),
        (  # CheckpointManager.Config, the default (trainer.py:105-107)
            "llama3_70b()",
            "    config.checkpoint.bogus = 1\n",
            r"job\.py:9: config\.checkpoint\.bogus: torchtitan b5bcd76c has no such field "
            r"\(CheckpointManager\.Config",
        ),
        (
            "llama3_70b()",
            "    config.loss = ChunkedLossWrapper.Config(\n"
            "        loss_fn=CrossEntropyLoss.Config(vocab=1))\n",
            r"job\.py:9: config\.loss\.loss_fn\.vocab: .* no such field \(CrossEntropyLoss",
        ),
        (  # a section's field as it is set: named with its line now
            "llama3_70b()",
            "    config.parallelism.bogus = 1\n",
            r"job\.py:9: config\.parallelism\.bogus: torchtitan b5bcd76c has no such field",
        ),
    ],
)
def test_a_name_the_records_class_lacks_exits_2(
    tmp_path: Path, start: str, body: str, pattern: str
) -> None:
    with pytest.raises(InputError, match=pattern):
        _load(tmp_path, body, start)


def test_the_record_fields_are_torchtitans() -> None:
    """RECORD_FIELDS against the classes (and their bases) benchmarks/torchtitan_schema.py read
    from b5bcd76c (tests/data/torchtitan_config_schema.json)."""
    modules = json.loads((TESTS / "data" / "torchtitan_config_schema.json").read_text())["modules"]
    where = {
        "FullAC.Config": "torchtitan.distributed.activation_checkpoint",
        "SelectiveAC.Config": "torchtitan.distributed.activation_checkpoint",
        "MemoryBudgetAC.Config": "torchtitan.distributed.activation_checkpoint",
        "CheckpointManager.Config": "torchtitan.components.checkpointer.dcp",
        "BaseLoss.Config": "torchtitan.components.loss",
        "ChunkedLossWrapper.Config": "torchtitan.components.loss",
        "CrossEntropyLoss.Config": "torchtitan.components.loss",
    }
    classes = {c: v for m in modules.values() for c, v in m.get("classes", {}).items()}

    def names(cls: str) -> set[str]:  # a ClassVar (Configurable.Config._owner) is no field
        own = {f for f, kind in classes[cls]["fields"].items() if not kind.startswith("ClassVar")}
        return own.union(*(names(b) for b in classes[cls]["bases"] if b in classes))

    for cls, module in where.items():
        assert cls in modules[module]["classes"]
        assert RECORD_FIELDS[cls][0] == names(cls), cls
    # TorchCheckpointingManager.Config adds none (torch_checkpointing.py:122-124)
    base = names("BaseCheckpointManager.Config")
    assert RECORD_FIELDS["TorchCheckpointingManager.Config"][0] == base


def test_fields_the_class_has_are_read_or_refused_off_their_default(tmp_path: Path) -> None:
    """preserve_rng_state and determinism_check (:120-140) and the checkpointer's fields change
    no memory or time the plan holds: the plan is the baseline's. debug ("Will be slower",
    :136-140) and SelectiveAC's force_recompute_mm_shapes_by_fqns (:196-207) are taken at their
    defaults only, as the sections' UNMODELLED fields are."""
    plain = _load(tmp_path, "")
    set_ = _load(
        tmp_path,
        "    config.activation_checkpoint.preserve_rng_state = False\n"
        '    config.activation_checkpoint.determinism_check = "none"\n'
        "    config.checkpoint.enable = True\n"
        "    config.checkpoint.interval = 100\n"
        '    config.checkpoint.async_mode = "async"\n',
    )
    assert set_.require_layout() == plain.require_layout()
    assert set_.require_layout().recompute == "full"  # FullAC.Config kept, its fields set
    with pytest.raises(InputError, match=r"activation_checkpoint\.debug: true: planner models"):
        _load(tmp_path, "    config.activation_checkpoint.debug = True\n")
    pattern = r"activation_checkpoint\.force_recompute_mm_shapes_by_fqns: \[\]: planner models"
    with pytest.raises(InputError, match=pattern):
        _load(
            tmp_path,
            "    config.activation_checkpoint.force_recompute_mm_shapes_by_fqns = []\n",
            "llama3_8b()",
        )
    default = _load(
        tmp_path,
        "    config.activation_checkpoint.force_recompute_mm_shapes_by_fqns = [\n"
        '        "moe.router.gate"]\n',
        "llama3_8b()",
    )
    assert default.require_layout().recompute == "selective"


@pytest.mark.parametrize(
    ("body", "pattern"),
    [
        (  # the QA repros: int('8') a call, 2**3 an operator the reader does not evaluate
            "    config.loss = ChunkedLossWrapper.Config(\n        num_chunks=int('8'))\n",
            r"job\.py:10: config\.loss\.num_chunks: planner does not evaluate int\('8'\)$",
        ),
        (
            "    config.loss = ChunkedLossWrapper.Config(\n        num_chunks=2**3)\n",
            r"job\.py:10: config\.loss\.num_chunks: planner does not evaluate 2\*\*3$",
        ),
        (
            "    config.model_spec = model_registry('70B', moe_comm_backend=str('deepep'))\n",
            r"job\.py:9: config\.model_spec\.moe_comm_backend: planner does not evaluate str",
        ),
        (
            "    config.model_spec = model_registry(str('70B'))\n",
            r"job\.py:9: config\.model_spec: planner does not evaluate str\('70B'\)$",
        ),
        (
            "    config.model_spec = model_registry('70B', converters=[\n"
            "        Float8LinearConverter.Config(filter_fqns=[name('lm_head')])])\n",
            r"job\.py:10: config\.model_spec: converters: filter_fqns: planner does not "
            r"evaluate name\('lm_head'\)$",
        ),
        (
            "    config.model_spec = model_registry('70B', converters=[\n"
            "        Float8LinearConverter.Config(recipe_name=pick())])\n",
            r"job\.py:10: .*recipe_name: planner does not evaluate pick\(\)$",
        ),
        (
            "    config.model_spec = model_registry('70B', converters=[2**3])\n",
            r"job\.py:9: config\.model_spec\.converters: planner does not evaluate 2\*\*3$",
        ),
        (
            "    config.parallelism.pipeline_parallel_degree = 2\n"
            "    config.training.disable_cuda_graphs = True\n"
            "    config.parallelism.module_fqns_per_model_part = [['tok_embeddings'], [f()]]\n",
            r"job\.py:11: config\.parallelism\.module_fqns_per_model_part: planner does not "
            r"evaluate f\(\)$",
        ),
    ],
)
def test_a_value_not_evaluated_is_named_as_written(tmp_path: Path, body: str, pattern: str) -> None:
    """Every value of a record's keyword or a list reaches a table or a message through
    `Document._checked`: never planner's Record(...) or Unread(...)."""
    with pytest.raises(InputError, match=pattern) as info:
        _load(tmp_path, body)
    assert "Record(" not in str(info.value) and "Unread(" not in str(info.value)


@pytest.mark.parametrize("name", ["job.py", "job.toml"])
def test_a_torchtitan_config_is_read_under_the_size_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """`--torchtitan-config` reads through files.read_file, at most MAX_INPUT_CHARS (a smaller
    cap here: /dev/zero read whole filled memory, MemoryError)."""
    monkeypatch.setattr(files, "MAX_INPUT_CHARS", 100)
    path = tmp_path / name
    path.write_text("# " + "x" * 200 + "\n")
    with pytest.raises(InputError, match=rf"{name}: more than 100 characters"):
        torchtitan_config.load(path, "h100-sxm-80gb", 64)


def test_a_pipe_with_a_writer_is_read_as_a_file() -> None:
    """`planner check <(...)`: bash hands planner /dev/fd/N, a pipe its writer fills and closes."""
    root = Path(__file__).resolve().parents[2]
    plan = root / "examples" / "llama3.1-8b-h100.toml"
    done = subprocess.run(
        ["bash", "-c", '"$0" -m planner check <(cat "$1")', sys.executable, str(plan)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )
    assert done.returncode in (0, 1), done.stderr
    assert "fits" in done.stdout
