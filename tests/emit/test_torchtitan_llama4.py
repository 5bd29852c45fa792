"""torchtitan's Llama 4 flavors, 17bx16e and 17bx128e, as their own zoo entries.

Oracles: pytorch/torchtitan e347b1e5 torchtitan/models/llama4/__init__.py:38-60 (the flavor
dict `llama4_args`), model/args.py:29-63 (TransformerModelArgs defaults), model/model.py
(:203 head_dim, :326-330 the dense FFN's width, :387 which layers are MoE, :389-402 the
experts' width, :485/:495 the untied embedding and output), models/moe/moe.py:21-38 (MoEArgs
defaults), :445-446 (the shared expert), :456-463 (the expert bias buffer). They are not HF
Llama 4 Scout / Maverick: no RoPE-less layers (every_n_layers_nope unset, args.py:56), no q/k
norm (model.py:258-269), so the HF config is refused by the torchtitan targets naming those
fields. models/llama4 is gone from torchtitan b5bcd76c (deprecated in d92336fe), so the
Python-configuration target and reader refuse it by field, exit 2. Where the torchtitan mirror
is present the hand-copied flavor dict is checked against e347b1e5's source.
"""

from __future__ import annotations

import ast
import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from cli_run import run
from paths import HF
from plan_text import plan_text, write

from planner.emit.launch import render
from planner.inputs import catalog, torchtitan_config
from planner.inputs.plan import load_plan
from planner.inputs.torchtitan import MODELS, zoo_flavor
from planner.model.params import params_total

MIRROR = Path("/work/.mirror/pytorch+torchtitan/repo")
COMMIT = "e347b1e5"
ZOO = {"17bx16e": "llama4-17bx16e-titan", "17bx128e": "llama4-17bx128e-titan"}

FLAVORS: dict[str, dict[str, Any]] = {
    # e347b1e5 torchtitan/models/llama4/__init__.py:38-50
    "17bx16e": {
        "dim": 5120,
        "n_layers": 48,
        "n_heads": 40,
        "n_kv_heads": 8,
        "ffn_dim_multiplier": 1.2,
        "multiple_of": 2048,
        "num_experts": 16,
        "interleave_moe_layer_step": 1,
        "max_seq_len": 10485760,
    },
    # __init__.py:51-60: interleave_moe_layer_step and max_seq_len left at args.py:63, :42
    "17bx128e": {
        "dim": 5120,
        "n_layers": 48,
        "n_heads": 40,
        "n_kv_heads": 8,
        "ffn_dim_multiplier": 1.2,
        "multiple_of": 2048,
        "num_experts": 128,
        "interleave_moe_layer_step": 2,
        "max_seq_len": 1048576,
    },
}
VOCAB = 202048  # args.py:35
TOP_K, SHARED = 1, 1  # moe.py:34, :24


def dense_width(f: dict[str, Any]) -> int:
    """model.py:326-330 with hidden_dim 4 x dim (:406-411)."""
    hidden = int(f["ffn_dim_multiplier"] * int(2 * (4 * f["dim"]) / 3))
    return int(f["multiple_of"] * ((hidden + f["multiple_of"] - 1) // f["multiple_of"]))


def expert_width(f: dict[str, Any]) -> int:
    """model.py:389-402 (auto_scale_hidden_dim True, args.py:61)."""
    hidden = int(int(f["ffn_dim_multiplier"] * int(2 * (4 * f["dim"]) / 3)) / (TOP_K + SHARED))
    return int(hidden + -hidden % f["multiple_of"])


@pytest.mark.parametrize("flavor", FLAVORS)
def test_zoo_entry_is_the_flavors_shape(flavor: str) -> None:
    f, arch = FLAVORS[flavor], catalog.get_model(ZOO[flavor])
    # 4 x 5120 = 20480 -> int(x 2/3) 13653 -> int(x 1.2) 16383 -> 16384; / 2 = 8191 -> 8192
    assert (dense_width(f), expert_width(f)) == (16384, 8192)
    moe = tuple(int((i + 1) % f["interleave_moe_layer_step"] == 0) for i in range(48))  # :387
    assert arch.moe_layers == [bool(x) for x in moe]
    assert (arch.num_layers, arch.hidden_size) == (f["n_layers"], f["dim"])
    assert (arch.num_attention_heads, arch.num_query_groups) == (f["n_heads"], f["n_kv_heads"])
    assert arch.kv_channels == f["dim"] // f["n_heads"] == 128
    assert arch.vocab_size == VOCAB
    assert arch.max_position_embeddings == f["max_seq_len"]
    assert arch.num_moe_experts == f["num_experts"] and arch.moe_router_topk == TOP_K
    assert arch.moe_ffn_hidden_size == expert_width(f)
    assert arch.moe_shared_expert_intermediate_size == SHARED * expert_width(f)
    assert arch.ffn_hidden_size == dense_width(f)
    assert arch.moe_router_score_function == "sigmoid"  # moe.py:27
    assert arch.moe_router_enable_expert_bias  # moe.py:38 load_balance_coeff 1e-3
    assert arch.moe_apply_probs_on_input  # moe.py:31 score_before_experts
    assert arch.no_rope_freq is None and not arch.qk_l2_norm and not arch.qk_layernorm
    assert arch.position_embedding_type == "rope" and arch.untie_embeddings_and_output_weights
    assert not arch.add_bias_linear and arch.gated_linear_unit
    assert arch.normalization == "RMSNorm"
    assert zoo_flavor(arch) == ZOO[flavor] and MODELS[ZOO[flavor]] == ("llama4", flavor)


def _literal(node: ast.expr) -> Any:
    return ast.literal_eval(node)


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no torchtitan mirror")
def test_flavor_dict_is_the_mirrors() -> None:
    """The hand copy above against e347b1e5's llama4_args (the call's literal keywords)."""
    text = subprocess.run(
        ["git", "--git-dir", str(MIRROR), "show", f"{COMMIT}:torchtitan/models/llama4/__init__.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: dict[str, dict[str, Any]] = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.keys):
            for key, value in zip(node.keys, node.values, strict=True):
                assert isinstance(key, ast.Constant) and isinstance(value, ast.Call)
                args: dict[str, Any] = {}
                for kw in value.keywords:
                    if isinstance(kw.value, ast.Call):  # MoEArgs(num_experts=...)
                        args.update({k.arg: _literal(k.value) for k in kw.value.keywords})
                    else:
                        args[str(kw.arg)] = _literal(kw.value)
                found[str(key.value)] = args
    defaults = {"interleave_moe_layer_step": 2, "max_seq_len": 1048576}  # args.py:63, :42
    for flavor, want in FLAVORS.items():
        got = {**defaults, **found[flavor]}
        assert {k: got[k] for k in want} == want
        assert "every_n_layers_nope" not in got and "vocab_size" not in got


def test_parameter_counts_by_hand() -> None:
    attention = 2 * 5120 * 5120 + 2 * 5120 * 8 * 128  # wq, wo; wk, wv (model.py:206-213)
    norms = 2 * 5120  # attention_norm, ffn_norm
    expert = 3 * 5120 * 8192  # w1, w2, w3 of one expert (and of the shared one)
    ends = 2 * VOCAB * 5120 + 5120  # tok_embeddings, output, final norm

    def moe(e: int) -> int:
        return attention + norms + (e + 1) * expert + 5120 * e  # + router gate (no bias)

    dense = attention + norms + 3 * 5120 * 16384
    assert params_total(catalog.get_model(ZOO["17bx16e"])) == 48 * moe(16) + ends
    assert 48 * moe(16) + ends == 107_769_861_120
    assert params_total(catalog.get_model(ZOO["17bx128e"])) == 24 * (moe(128) + dense) + ends
    assert 24 * (moe(128) + dense) + ends == 400_711_848_960


TITAN = "[training]\nframework = 'torchtitan'\nseq_length = 8192\nglobal_batch_size = {gbs}\n"
LAYOUTS = {
    "17bx16e": (64, 64, "tp = 8\netp = 8\nmicro_batch_size = 8\n"),
    "17bx128e": (256, 256, "tp = 8\nep = 8\netp = 1\nmicro_batch_size = 1\n"),
}


def _plan(tmp_path: Path, flavor: str) -> Path:
    gpus, gbs, par = LAYOUTS[flavor]
    text = plan_text(
        model=f'[model]\nname = "{ZOO[flavor]}"\n',
        cluster=f'[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = {gpus}\n',
        training=TITAN.format(gbs=gbs),
        parallel=f'[parallel]\n{par}zero_stage = 3\nrecompute = "full"\n',
    )
    return write(tmp_path, text)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_launch_writes_the_flavor_and_reads_back(tmp_path: Path, flavor: str) -> None:
    plan = load_plan(_plan(tmp_path, flavor))
    text = render(plan, "torchtitan", "job")[1]
    assert tomllib.loads(text)["model"] | {"hf_assets_path": ""} == {
        "name": "llama4",
        "flavor": flavor,
        "hf_assets_path": "",
    }
    out = tmp_path / "job.toml"
    out.write_text(text)
    back = torchtitan_config.load(out, None, None)
    assert back.job.arch == plan.job.arch == catalog.get_model(ZOO[flavor])
    a, b = back.require_layout(), plan.require_layout()
    fields = ("tp", "pp", "dp", "ep", "expert_tp", "micro_batch_size", "zero_stage", "recompute")
    assert [getattr(a, k) for k in fields] == [getattr(b, k) for k in fields]  # etp: None -> tp


def test_module_target_refuses_llama4_by_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        ["launch", str(_plan(tmp_path, "17bx16e")), "--target", "torchtitan-module"], capsys
    )
    assert code == 2 and ": model: torchtitan b5bcd76c has no llama4 17bx16e" in err
    assert "d92336fe" in err and "KeyError" not in err


def test_module_reader_refuses_llama4_by_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = plan_text(
        model='[model]\nname = "llama3.1-8b"\n',
        cluster='[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n',
        training=TITAN.format(gbs=8),
        parallel='[parallel]\nmicro_batch_size = 1\nzero_stage = 3\nrecompute = "full"\n',
    )
    module = render(load_plan(write(tmp_path, text)), "torchtitan-module", "job")[1]
    assert "from torchtitan.models.llama3 import model_registry" in module
    module = module.replace(
        "models.llama3 import model_registry", "models.llama4 import model_registry"
    )
    path = tmp_path / "job.py"
    path.write_text(module.replace("model_registry('8B')", "model_registry('17bx16e')"))
    code, _, err = run(["check", "--torchtitan-config", str(path)], capsys)
    assert code == 2, err
    assert "config.model_spec: torchtitan b5bcd76c has no torchtitan.models.llama4" in err


@pytest.mark.parametrize("target", ["torchtitan", "torchtitan-module"])
def test_hf_scout_is_not_the_flavor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    folder = tmp_path / "scout"
    folder.mkdir()
    folder.joinpath("config.json").write_text((HF / "llama4-scout-17b-16e.json").read_text())
    assert json.loads(folder.joinpath("config.json").read_text())["model_type"] == "llama4"
    text = plan_text(
        model='[model]\nhf_config = "scout/config.json"\n',
        cluster='[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 64\n',
        training=TITAN.format(gbs=64),
        parallel="[parallel]\ntp = 8\netp = 8\nmicro_batch_size = 8\nzero_stage = 3\n",
    )
    code, _, err = run(["launch", str(write(tmp_path, text)), "--target", target], capsys)
    assert code == 2 and ": model: torchtitan " in err
    # HF Scout: every 4th layer RoPE-less and an L2 q/k norm (its config.json); the flavor neither
    assert "llama4 17bx16e (planner's llama4-17bx16e-titan), differs in no_rope_freq 4" in err
    assert "qk_l2_norm true (its false)" in err


def test_check_refuses_a_llama4_plan_only_the_python_configurations_could_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a chunked loss makes the plan the Python configurations' (the TOML target refuses it),
    # and b5bcd76c has no llama4 (deleted in d92336fe): no target writes it, so check exits 2
    # naming the model (rules.torchtitan_era.head_era) rather than judging it
    path = tmp_path / "l4.toml"
    path.write_text(
        '[model]\nname = "llama4-17bx16e-titan"\n[cluster]\ngpu = "h100-sxm-80gb"\n'
        'num_gpus = 64\n[training]\nframework = "torchtitan"\nseq_length = 8192\n'
        "global_batch_size = 64\n[torchtitan]\nloss_chunks = 8\n[parallel]\ntp = 8\nep = 8\n"
        'zero_stage = 3\nrecompute = "full"\n'
    )
    code, _, err = run(["check", str(path)], capsys)
    assert code == 2 and "model.name" in err and "no torchtitan target writes" in err
    path.write_text(path.read_text().replace("loss_chunks = 8", "loss_chunks = 1"))
    code, _, err = run(["check", str(path)], capsys)
    assert code in (0, 1), err
