"""Which torchtitan flavor a plan launches: chosen by the model's shape, never by its name.

Oracles: the zoo entries `planner.inputs.torchtitan.MODELS` maps to a flavor (Qwen3-30B-A3B: 48
layers, 128 experts, Qwen Team 2025 arXiv:2505.09388 Table 2; Llama 3.1 70B: 80 layers, hidden
8192, FFN 28672, 64 heads, 8 KV heads, Llama Team 2024 arXiv:2407.21783 Table 3); the published
config.json fixtures of tests/data/hf, some keys changed as each test says. A config named after a
flavor but of another shape must be refused naming the fields that differ (the QA pass found the
24-layer, 64-expert one launched as the 48-layer, 128-expert flavor, exit 0); one of a flavor's
shape under another name must launch that flavor (the QA found Llama 3.1 70B's config, named
llama-3.1-70b from its _name_or_path, refused).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_run import run
from paths import HF
from plan_text import plan_text, write

from planner.emit.launch import launch
from planner.inputs import catalog
from planner.inputs.errors import InputError
from planner.inputs.hf_import import load_hf_config
from planner.inputs.torchtitan import zoo_flavor

TITAN = "[training]\nframework = 'torchtitan'\nseq_length = 8192\nglobal_batch_size = 128\n"
CLUSTER = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 64\n'
TARGETS = ("torchtitan", "torchtitan-module")


def hf_plan(tmp_path: Path, cfg: dict[str, Any], folder: str, parallel: str) -> Path:
    """A torchtitan plan of `cfg` saved as `folder`/config.json (named from the folder when the
    config has no _name_or_path)."""
    config = tmp_path / folder / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(cfg))
    model = f'[model]\nhf_config = "{folder}/config.json"\n'
    text = plan_text(model=model, cluster=CLUSTER, training=TITAN, parallel=parallel)
    return write(tmp_path, text)


def qwen3_30b_a3b_halved() -> dict[str, Any]:
    """The published Qwen3-30B-A3B config with 24 layers and 64 experts (the QA's), no
    _name_or_path."""
    cfg: dict[str, Any] = json.loads((HF / "qwen3-30b-a3b.json").read_text())
    cfg.pop("_name_or_path", None)
    return {**cfg, "num_hidden_layers": 24, "max_window_layers": 24, "num_experts": 64}


def llama31_70b() -> dict[str, Any]:
    """Llama 3.1 70B's config.json: the published 8B one (the same family, vocabulary, RoPE and
    context) with the 70B's shape (arXiv:2407.21783 Table 3) and its _name_or_path."""
    cfg: dict[str, Any] = json.loads((HF / "llama3.1-8b.json").read_text())
    return {
        **cfg,
        "_name_or_path": "meta-llama/Llama-3.1-70B",
        "num_hidden_layers": 80,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
    }


@pytest.mark.parametrize("target", TARGETS)
def test_a_flavors_name_on_another_shape_is_refused_by_field(tmp_path: Path, target: str) -> None:
    path = hf_plan(
        tmp_path, qwen3_30b_a3b_halved(), "qwen3-30b-a3b", "[parallel]\nzero_stage = 3\nep = 2\n"
    )
    assert load_hf_config(tmp_path / "qwen3-30b-a3b" / "config.json").name == "qwen3-30b-a3b"
    with pytest.raises(InputError) as err:
        launch(path, target)
    message = str(err.value)
    assert message.startswith(f"{path}: model: torchtitan ")
    assert "has no flavor of 'qwen3-30b-a3b'" in message
    # the difference, field by field, against the zoo's 48 layers and 128 experts
    assert (
        "the nearest, qwen3 30B-A3B (planner's qwen3-30b-a3b), differs in num_layers 24 (its 48), "
        "num_moe_experts 64 (its 128);"
    ) in message


def test_the_refusal_exits_2_at_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = hf_plan(
        tmp_path, qwen3_30b_a3b_halved(), "qwen3-30b-a3b", "[parallel]\nzero_stage = 3\nep = 2\n"
    )
    code, out, err = run(["launch", str(path), "--target", "torchtitan-module"], capsys)
    assert code == 2 and not out
    assert "num_layers 24 (its 48)" in err and "Traceback" not in err


@pytest.mark.parametrize("target", TARGETS)
def test_a_flavors_shape_under_another_name_launches_it(tmp_path: Path, target: str) -> None:
    path = hf_plan(tmp_path, llama31_70b(), "llama70", "[parallel]\ntp = 8\nzero_stage = 3\n")
    arch = load_hf_config(tmp_path / "llama70" / "config.json")
    assert arch.name == "llama-3.1-70b" != "llama3.1-70b"
    assert zoo_flavor(arch) == "llama3.1-70b"
    text = launch(path, target).text
    if target == "torchtitan":
        assert 'name = "llama3"\nflavor = "70B"' in text
    else:
        assert "config = llama3_70b()" in text and "model_registry('70B')" in text


def test_every_flavor_is_found_for_its_zoo_entry_and_its_published_config() -> None:
    # each zoo entry names its own flavor; the published configs of two of them, and DeepSeek-V3's
    # (whose make_vocab_size_divisible_by, 128, is not the zoo's 3232: Megatron's padding, no
    # part of a torchtitan flavor), find theirs
    from planner.inputs.torchtitan import MODELS

    for name in MODELS:
        assert zoo_flavor(catalog.get_model(name)) == name
    for fixture, zoo in [
        ("llama3.1-8b", "llama3.1-8b"),
        ("qwen3-30b-a3b", "qwen3-30b-a3b"),
        ("gpt-oss-120b", "gpt-oss-120b"),
        ("deepseek-v3", "deepseek-v3"),
    ]:
        assert zoo_flavor(load_hf_config(HF / f"{fixture}.json")) == zoo
    # a zoo model torchtitan defines no flavor of, and a renamed zoo entry that keeps its shape
    assert zoo_flavor(catalog.get_model("llama2-7b")) is None
    renamed = catalog.get_model("llama3.1-8b").model_copy(update={"name": "my-llama"})
    assert zoo_flavor(renamed) == "llama3.1-8b"
