"""torchtitan Python configurations (b5bcd76c): a field set on a record of one of torchtitan's own
classes that the plan does not read (the optimizer, the learning-rate schedule, metrics, the
profiler, the validator, the data loader, the tokenizer, communication, the model converters)
was not checked: `config.optimizer.bogus = 1` planned, where torchtitan raises AttributeError.

Oracles: torchtitan b5bcd76c's source (`git show b5bcd76c:<path>` in the pytorch/torchtitan
mirror): every one of those classes is `@dataclass(kw_only=True, slots=True)` over the slotted
Configurable.Config (torchtitan/config/configurable.py:40-41), so a name the class lacks raises
AttributeError when set and TypeError as a keyword; the classes' lines are
planner.inputs.torchtitan_records.OWN_RECORD_FIELDS' (e.g. OptimizersContainer.Config
components/optimizer/optimizer.py:103-136: param_groups, implementation,
optimizer_factory_kwargs_by_name); what Trainer.Config holds where nothing sets it is its
default_factory (trainer.py:89-115: BaseDataLoader.Config, which has no field, :96); every
baseline passes `dataloader=GrainDataLoader.Config(...)` and `optimizer=default_adamw(...)`,
which returns an OptimizersContainer.Config (optimizer.py:378-398). The fields are checked against
the classes as benchmarks/torchtitan_schema.py reads them (tests/data/torchtitan_config_schema.json,
and the mirror's files where the machine has it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO, TESTS

from planner.inputs import torchtitan_config
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan
from planner.inputs.torchtitan_records import OWN_RECORD_FIELDS, TRAINER_DEFAULT_RECORDS

sys.path.insert(0, str(REPO))
from benchmarks.torchtitan_schema import describe

MIRROR = Path("/work/.mirror/pytorch+torchtitan/repo")
HEAD = (
    "from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw\n"
    "from torchtitan.components.quantization import Float8LinearConverter\n"
    "from torchtitan.config import configs\n"
    "from torchtitan.models.llama3 import model_registry\n"
    "from torchtitan.models.llama3.config_registry import llama3_70b\n"
    "from torchtitan.trainer import Trainer\n\n\n"
    "def job():\n"
)
"""`def job():` is line 9, `config = ...` line 10: `body` starts at line 11."""


def _load(tmp_path: Path, body: str, start: str = "llama3_70b()") -> Plan:
    path = tmp_path / "job.py"
    path.write_text(f"{HEAD}    config = {start}\n{body}    return config\n")
    return torchtitan_config.load(path, "h100-sxm-80gb", 64)


@pytest.mark.parametrize(
    ("start", "body", "pattern"),
    [
        (  # the default optimizer record (trainer.py:97-99; the baseline's default_adamw)
            "llama3_70b()",
            "    config.optimizer.bogus = 1\n",
            r"job\.py:11: config\.optimizer\.bogus: torchtitan b5bcd76c has no such field "
            r"\(OptimizersContainer\.Config, components/optimizer/optimizer\.py:103-136\)",
        ),
        (  # lr is default_adamw's keyword (optimizer.py:378), not a field of what it returns
            "llama3_70b()",
            "    config.optimizer = default_adamw(lr=3e-4)\n    config.optimizer.lr = 1e-4\n",
            r"job\.py:12: config\.optimizer\.lr: .* no such field \(OptimizersContainer\.Config",
        ),
        (
            "llama3_70b()",
            "    config.lr_scheduler = LRSchedulersContainer.Config(warmup=10)\n",
            r"job\.py:11: config\.lr_scheduler\.warmup: .* no such field "
            r"\(LRSchedulersContainer\.Config, components/optimizer/lr_scheduler\.py:51-194\)",
        ),
        (
            "llama3_70b()",
            "    config.metrics.log_frequency = 5\n",
            r"job\.py:11: config\.metrics\.log_frequency: .* \(MetricsProcessor\.Config",
        ),
        (
            "llama3_70b()",
            "    config.profiler.enable = True\n",
            r"job\.py:11: config\.profiler\.enable: .* no such field \(Profiler\.Config",
        ),
        (
            "llama3_70b()",
            "    config.comm = configs.CommConfig(timeout=10)\n",
            r"job\.py:11: config\.comm\.timeout: .* \(configs\.CommConfig, config/configs\.py",
        ),
        (  # Trainer.Config's own default loader has no field (loader.py:43-44)
            "Trainer.Config(model_spec=model_registry('8B'))",
            "    config.dataloader.seed = 3\n",
            r"job\.py:11: config\.dataloader\.seed: .* \(BaseDataLoader\.Config",
        ),
        (  # a converter in model_registry's list (float8.py:57-72)
            "llama3_70b()",
            "    config.model_spec = model_registry('70B', converters=[\n"
            "        Float8LinearConverter.Config(recipe='rowwise')])\n",
            r"job\.py:11: config\.model_spec\.converters\[0\]\.recipe: .* no such field "
            r"\(Float8LinearConverter\.Config",
        ),
    ],
)
def test_a_name_the_class_lacks_exits_2(
    tmp_path: Path, start: str, body: str, pattern: str
) -> None:
    with pytest.raises(InputError, match=pattern):
        _load(tmp_path, body, start)


def test_the_fields_the_classes_have_read_as_the_baseline(tmp_path: Path) -> None:
    plain = _load(tmp_path, "")
    set_ = _load(
        tmp_path,
        "    config.optimizer = default_adamw(lr=3e-4, weight_decay=0.0)\n"
        '    config.optimizer.implementation = "foreach"\n'
        "    config.lr_scheduler.warmup_steps = 10\n"
        "    config.dataloader.seed = 3\n"  # the baseline's GrainDataLoader.Config (loader.py:58)
        "    config.validator.freq = 5\n"
        "    config.metrics.log_freq = 5\n"
        "    config.profiler.enable_profiling = True\n"
        "    config.comm = configs.CommConfig(train_timeout_seconds=600)\n",
    )
    assert set_.require_layout() == plain.require_layout()
    fp8 = _load(
        tmp_path,
        "    config.model_spec = model_registry('70B', converters=[\n"
        "        Float8LinearConverter.Config(recipe_name='rowwise', filter_fqns=['lm_head'])])\n",
    )
    assert fp8.job.precision == "fp8"
    # a class the reader does not know (a user's) is not looked into
    _load(tmp_path, "    config.optimizer = MyOptimizer.Config(anything=1)\n")


def _classes(modules: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    return {c: v for m in modules.values() for c, v in m.get("classes", {}).items()}  # type: ignore[attr-defined]


def _names(classes: dict[str, dict[str, object]], cls: str) -> set[str]:
    """A class's fields and its bases' (a ClassVar is no field)."""
    fields: dict[str, str] = classes[cls]["fields"]  # type: ignore[assignment]
    own = {f for f, kind in fields.items() if not kind.startswith("ClassVar")}
    bases: list[str] = classes[cls]["bases"]  # type: ignore[assignment]
    return own.union(*(_names(classes, b) for b in bases if b in classes))


def test_the_fields_are_those_of_the_schema() -> None:
    """The classes tests/data/torchtitan_config_schema.json holds (b5bcd76c)."""
    data = json.loads((TESTS / "data" / "torchtitan_config_schema.json").read_text())
    classes = _classes(data["modules"])
    held = [c for c in OWN_RECORD_FIELDS if c in classes]
    assert len(held) >= 9, held  # optimizer, lr scheduler, profiler, comm, converters
    for cls in held:
        assert OWN_RECORD_FIELDS[cls][0] == _names(classes, cls), cls
    trainer: dict[str, str] = classes["Trainer.Config"]["fields"]  # type: ignore[assignment]
    assert set(TRAINER_DEFAULT_RECORDS) <= set(trainer)


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no torchtitan mirror on this machine")
def test_the_fields_and_defaults_are_torchtitans() -> None:
    """Every class against its file at b5bcd76c, read as benchmarks/torchtitan_schema.py reads
    files; the classes are slotted dataclasses; Trainer.Config's defaults (trainer.py:89-115)."""

    def show(path: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", str(MIRROR), "show", f"b5bcd76c:torchtitan/{path}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    paths = {where.split(":")[0] for _, where in OWN_RECORD_FIELDS.values()}
    paths |= {"config/configurable.py", "protocols/model.py", "components/quantization/__init__.py"}
    modules = {p: describe(f"torchtitan/{p}", show(p)) for p in sorted(paths)}
    classes = _classes(modules)  # type: ignore[arg-type]
    for cls, (fields, where) in OWN_RECORD_FIELDS.items():
        assert fields == _names(classes, cls), cls
        path, lines = where.split(",")[0].split(":")
        first = int(lines.split("-")[0])
        text = show(path).splitlines()
        assert text[first - 2].strip() == "@dataclass(kw_only=True, slots=True)", cls
        assert text[first - 1].strip().startswith(f"class {cls.split('.')[-1]}"), cls
    trainer = show("trainer.py").splitlines()
    for name, cls in TRAINER_DEFAULT_RECORDS.items():
        line = next(i for i, t in enumerate(trainer) if t.strip().startswith(f"{name}:"))
        declared = " ".join(trainer[line : line + 3])
        assert re.search(rf"default_factory={re.escape(cls)}\s*\)", declared), name
