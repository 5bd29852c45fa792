"""check's fix list in the checked input's own terms (QA of the fix list, items 1-9): each change
listed as making a Megatron-LM line, a test configuration's YAML, a NeMo line or a torchtitan
TOML fit is applied to that input exactly as its `input_edits` say (by this file's own editors:
text substitution in the script, the YAML's MODEL_ARGS mapping, the NeMo line's words, the
TOML's tables), and the edited input, checked again, fits at the global batch it had, its peak
the one the change claims (the checked peak less `saves_gib`, both printed to 0.1 GiB). Oracle:
`planner check` of the edited input itself, the round trip. A change the input cannot say is
marked plan file only and not listed as making it fit; oracle: the reader's refusal of the
input's own spelling (exit 2).

The inputs are the QA's (Llama 3 8B shapes on 8 H100, Llama 3 8B / 70B TOMLs on 32)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_run import run

from planner.inputs import torchtitan_config
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost
from planner.model.memory import DEFAULT_HEADROOM_PCT
from planner.search import advice
from planner.search.advice import Change
from planner.search.rules import check_plan

GPU = ["--gpu", "h100-sxm-80gb"]

MODEL = (
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --kv-channels 128 --swiglu --normalization "
    "RMSNorm --untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256 "
    "--position-embedding-type rope"
)


def _script(tp: int, pp: int, seq: int, rest: str) -> str:
    """A launch script as the QA's (variables for tp and pp, the model in an array)."""
    return (
        "#!/bin/bash\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n"
        f"TP={tp}\nPP={pp}\nMODEL_ARGS=(\n  {MODEL} --seq-length {seq} "
        f"--max-position-embeddings {seq}\n)\n"
        'torchrun --nproc_per_node 8 pretrain_gpt.py "${MODEL_ARGS[@]}" \\\n'
        "  --tensor-model-parallel-size ${TP} --pipeline-model-parallel-size $PP \\\n"
        f"  {rest} --bf16 \\\n"
        "  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \\\n"
        '  --lr 3e-4 --data-path "/data/my corpus"\n'
    )


M1 = _script(1, 1, 8192, "--micro-batch-size 2 --global-batch-size 128")
"""QA m1: 150 GiB; its fixes include full recompute (item 6)."""
M3 = _script(
    2,
    2,
    20480,
    "--micro-batch-size 1 --sequence-parallel --num-layers-per-virtual-pipeline-stage 2 "
    "--global-batch-size 256",
)
"""QA m3: vpp 8 from the layers-per-virtual-stage flag (item 2)."""
M4 = _script(1, 1, 4096, "--micro-batch-size 1 --global-batch-size 128")
"""QA m4: 3.4 GiB over; Megatron-FSDP and the offloaded optimizer fit (items 7, 8)."""

Y2: dict[str, Any] = {
    "ENV_VARS": {"CUDA_DEVICE_MAX_CONNECTIONS": 1},
    "MODEL_ARGS": {
        "--num-layers": 32, "--hidden-size": 4096, "--num-attention-heads": 32,
        "--micro-batch-size": 1, "--global-batch-size": 128, "--seq-length": 2048,
        "--max-position-embeddings": 2048, "--tokenizer-type": "NullTokenizer",
        "--vocab-size": 131073, "--mock-data": True, "--transformer-impl": "transformer_engine",
        "--tensor-model-parallel-size": 1, "--pipeline-model-parallel-size": 2,
        "--num-layers-per-virtual-pipeline-stage": 2, "--deterministic-mode": True,
        "--no-gradient-accumulation-fusion": True, "--use-mcore-models": True,
        "--ckpt-format": "torch_dist", "--bf16": True, "--attention-backend": "unfused",
    },
    "TEST_TYPE": "regular",
}  # fmt: skip
"""QA y2_2048's shape: a test configuration at vpp 8 from layers per virtual stage (item 2)."""

NEMO = (
    "nemo llm pretrain -y --factory llama3_8b trainer.num_nodes=1 trainer.devices=8 "
    "trainer.strategy.tensor_model_parallel_size=1 trainer.strategy.pipeline_model_parallel_size=1 "
    "trainer.strategy.context_parallel_size=1 data.micro_batch_size={mbs} data.seq_length={seq} "
    "data.global_batch_size=128 trainer.strategy.ddp.grad_reduce_in_fp32=True"
)
N1 = NEMO.format(mbs=2, seq=8192)
"""QA n1: its fixes include whole layers offloaded (item 5)."""
N3 = NEMO.format(mbs=1, seq=5120)
"""QA n3: 0.8 GiB over; the offloaded optimizer, ZeRO 2 and module offloading fit only as a plan
file (item 4)."""

T1 = """[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 2
seq_len = 8192
[parallelism]
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
[activation_checkpoint]
mode = "none"
[compile]
enable = true
"""
"""QA t1: global_batch_size unset (local x dp), so tp, cp and micro-batch changes must keep it
(item 9)."""
T2 = """[model]
name = "llama3"
flavor = "70B"
[training]
local_batch_size = 8
seq_len = 8192
[parallelism]
data_parallel_shard_degree = -1
tensor_parallel_degree = 4
pipeline_parallel_degree = 4
pipeline_parallel_microbatch_size = 1
[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"
[compile]
enable = true
"""
"""QA t2: Llama 3 70B tp 4 pp 4 on 32 (items 1, 3)."""


def _edit_script(text: str, edits: list[dict[str, Any]]) -> str:
    """Each edited flag's words struck from the script, the set ones written before --lr."""
    for e in edits:
        text = re.sub(rf" {re.escape(e['key'])}(?: +(?!--)[^\s\\]+)*(?=[\s\\])", "", text)
    added = " ".join(" ".join([e["key"], *e["value"]]) for e in edits if "value" in e)
    return text.replace(" --lr 3e-4", f" {added} --lr 3e-4")


def _edit_yaml(doc: dict[str, Any], edits: list[dict[str, Any]]) -> dict[str, Any]:
    args = dict(doc["MODEL_ARGS"])
    for e in edits:
        args.pop(e["key"], None)
        words = e.get("value")  # a switch is `true`, several words `[a b]` (the runner's)
        if words is not None:
            args[e["key"]] = (
                True if not words else f"[{' '.join(words)}]" if words[1:] else words[0]
            )
    return {**doc, "MODEL_ARGS": args}


def _edit_nemo(text: str, edits: list[dict[str, Any]]) -> str:
    keys = {e["key"] for e in edits}
    words = [w for w in text.split() if w.partition("=")[0] not in keys]
    return " ".join(words + [f"{e['key']}={e['value']}" for e in edits if "value" in e])


def _edit_toml(text: str, edits: list[dict[str, Any]]) -> str:
    doc = tomllib.loads(text)
    for e in edits:
        section, _, key = e["key"].rpartition(".")
        table = doc.setdefault(section, {})
        table.pop(key, None)
        if "value" in e:
            table[key] = e["value"]
    return "".join(
        f"[{name}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items())
        for name, table in doc.items()
    )


T3 = """[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 8
seq_len = 16384
[parallelism]
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
pipeline_parallel_degree = 8
pipeline_parallel_microbatch_size = 1
[activation_checkpoint]
mode = "none"
[compile]
enable = true
"""
"""Llama 3 8B at pp 8 on 32: dp 4, global batch 8 x 4 = 32; its cheapest tp, 4, leaves dp 1."""

INPUTS: dict[str, tuple[str, str, int]] = {
    "m1": ("line", M1, 8),
    "m3": ("line", M3, 8),
    "m4": ("line", M4, 8),
    "y2": ("yaml", "", 8),
    "n1": ("nemo", N1, 8),
    "n3": ("nemo", N3, 8),
    "t1": ("toml", T1, 32),
    "t2": ("toml", T2, 32),
    "t3": ("toml", T3, 32),
}


def _write(kind: str, text: str, folder: Path, edits: list[dict[str, Any]] | None = None) -> Path:
    """The input written (with `edits` applied), and the path check takes."""
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "yaml":
        doc = Y2 if edits is None else _edit_yaml(Y2, edits)
        (folder / "model_config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        return folder
    if edits is not None:
        edit = {"line": _edit_script, "nemo": _edit_nemo, "toml": _edit_toml}[kind]
        text = edit(text, edits)
    path = folder / ("job.toml" if kind == "toml" else "train.sh")
    path.write_text(text)
    return path


def _check(
    kind: str, path: Path, n: int, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str, str]:
    flag = "--torchtitan-config" if kind == "toml" else "--megatron-args"
    return run(["check", flag, str(path), *GPU, "--num-gpus", str(n), *extra], capsys)


def _verdict(out: str) -> tuple[int, float, bool]:
    """(global batch, peak GiB, fits) from check's text."""
    batch = int(re.search(r"global batch (\d+)", out)[1])  # type: ignore[index]
    peak = float(re.search(r"peak ([\d.]+) GiB", out)[1])  # type: ignore[index]
    return batch, peak, "does not fit" not in out


@pytest.mark.parametrize("name", list(INPUTS))
def test_each_fitting_change_holds_applied_to_the_input(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kind, text, n = INPUTS[name]
    path = _write(kind, text, tmp_path / "original")
    code, out, err = _check(kind, path, n, capsys, "--json")
    assert code == 1, err
    data = json.loads(out)
    batch = _verdict(_check(kind, path, n, capsys)[1])[0]
    fitting = [c for c in data["changes"] if c["fits"] and not c["plan_file_only"]]
    assert fitting
    for i, c in enumerate(fitting):
        edited = _write(kind, text, tmp_path / f"edit{i}", c["input_edits"])
        code, back, err = _check(kind, edited, n, capsys)
        assert code == 0, (c, back, err)
        got_batch, got_peak, fits = _verdict(back)
        claimed = data["memory"]["peak_gib"] - c["saves_gib"]
        assert fits and got_batch == batch, (c, back)
        assert abs(got_peak - claimed) <= 0.1, (c, got_peak, claimed)


def _change(data: dict[str, Any], field: str) -> dict[str, Any]:
    return next(c for c in data["changes"] if c["change"].startswith(field + " "))


def _json(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    kind, text, n = INPUTS[name]
    code, out, err = _check(kind, _write(kind, text, tmp_path / name), n, capsys, "--json")
    assert code == 1, err
    return json.loads(out)


def test_the_qa_items_are_said_in_the_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The QA's failing items, now said as what holds (the round trip above checks them)."""
    # 2: pp 2 -> 4 at vpp 8 on a line deriving vpp from layers per virtual stage: 32 layers /
    # (4 stages x 8 chunks) = 1 layer a chunk
    pp = _change(_json("m3", tmp_path, capsys), "pp")
    assert "--num-layers-per-virtual-pipeline-stage 1" in pp["in_input"]
    assert not pp["plan_file_only"]
    # the oracle tells: pp 4 alone, as the plan field said, leaves 2 layers a chunk (vpp 4) and
    # does not fit (the QA's 80.6 GiB)
    alone = _write("line", M3.replace("$PP \\", "4 \\"), tmp_path / "pp4")
    assert _check("line", alone, 8, capsys)[0] == 1
    # 6: full recompute with the method and count Megatron-Core asserts
    full = _change(_json("m1", tmp_path, capsys), "recompute")["in_input"]
    assert "--recompute-method" in full and "--recompute-num-layers" in full
    # 1: pp 4 -> 1 keeps the global batch 16: without pipelining torchtitan's micro-batch is
    # local_batch_size, so 16 / dp 8 = 2 micro-batches of... local 1 with global 16 said
    pp = _change(_json("t2", tmp_path, capsys), "pp")
    assert {"key": "training.global_batch_size", "value": 16} in pp["input_edits"]
    assert {"key": "training.local_batch_size", "value": 1} in pp["input_edits"]
    # 9: tp 2 on t1 says the global batch it keeps (64); tp alone halves it (local 2 x dp 16)
    tp = _change(_json("t1", tmp_path, capsys), "tp")
    assert {"key": "training.global_batch_size", "value": 64} in tp["input_edits"]
    alone = T1.replace("tensor_parallel_degree = 1", "tensor_parallel_degree = 2")
    out = _check("toml", _write("toml", alone, tmp_path / "tp2"), 32, capsys)[1]
    assert _verdict(out)[0] == 32
    # 5: the NeMo count with its switch
    off = _change(_json("n1", tmp_path, capsys), "cpu_offloading_num_layers")
    assert {"key": "model.config.cpu_offloading", "value": "True"} in off["input_edits"]


def test_tp_to_dp_one_on_a_toml_is_plan_file_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA item 3: tp 4 -> 8 leaves dp 1 beside tp and pp, which the TOML reader refuses (the
    oracle: check of the TOML so edited exits 2); the change is plan file only, and check's text
    lists it apart from the changes that make the file fit."""
    tp = _change(_json("t2", tmp_path, capsys), "tp")
    assert tp["fits"] and tp["plan_file_only"] and tp["input_edits"] == []
    edited = T2.replace("tensor_parallel_degree = 4", "tensor_parallel_degree = 8")
    code, _, err = _check("toml", _write("toml", edited, tmp_path / "tp8"), 32, capsys)
    assert code == 2, err
    out = _check("toml", _write("toml", T2, tmp_path / "t2text"), 32, capsys)[1]
    fit_part, _, only = out.partition("Fitting as a plan file only")
    assert "tp 4 -> 8" in only and "tp 4 -> 8" not in fit_part


@pytest.mark.parametrize(
    ("change", "spelling"),
    [
        ("training.optimizer_offload_fraction", "optim.config.optimizer_cpu_offload=True"),
        ("zero_stage", "trainer.strategy.ddp.data_parallel_sharding_strategy=optim_grads"),
        ("offload_modules", "model.config.fine_grained_activation_offloading=True"),
    ],
)
def test_what_no_nemo_line_says_is_plan_file_only(
    change: str, spelling: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA item 4: a NeMo line cannot say these (oracle: the reader refuses the NeMo spelling,
    exit 2); each is listed, marked plan file only."""
    c = _change(_json("n3", tmp_path, capsys), change)
    assert c["fits"] and c["plan_file_only"]
    path = _write("nemo", f"{N3} {spelling}", tmp_path / "spelt")
    assert _check("nemo", path, 8, capsys)[0] == 2


def test_the_next_value_of_a_setting_is_tried_where_the_cheapest_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """t3's cheapest tp that fits is 4, whose dp 4 -> 1 the TOML cannot say: with no shard
    degree above 1 and cp 1 beside tp and pp, torchtitan e347b1e5 applies no FSDP and turns
    mixed precision off (distributed/utils.py:251-256), so its reader refuses the file (oracle:
    check of t3 edited to tp 4, the global batch 32 kept as local 32 x dp 1, exits 2). The next
    tp, 2 (dp 2: FSDP over 2), is said in the TOML and listed as making it fit; the round trip
    above checks its edits. Where every value tried fails, the reason names the others (NeMo
    n3's ZeRO stages, none of which a NeMo line says)."""
    premise = _ranked(T3, 32, "tp", tmp_path / "ranked")  # the premise, as check ranks them
    assert [c.after for c in premise[:2]] == [4, 2] and all(c.fits for c in premise[:2])
    edited = T3.replace("tensor_parallel_degree = 1", "tensor_parallel_degree = 4")
    edited = edited.replace("local_batch_size = 8", "local_batch_size = 32")
    assert _check("toml", _write("toml", edited, tmp_path / "tp4"), 32, capsys)[0] == 2
    tp = _change(_json("t3", tmp_path, capsys), "tp")
    assert tp["change"].startswith("tp 1 -> 2 ") and not tp["plan_file_only"]
    assert {"key": "parallelism.tensor_parallel_degree", "value": 2} in tp["input_edits"]
    out = _check("toml", _write("toml", T3, tmp_path / "t3text"), 32, capsys)[1]
    fit_part = out.partition("Fitting as a plan file only")[0]
    assert "tp 1 -> 2 " in fit_part and "tp 1 -> 4 " not in out
    zero = _change(_json("n3", tmp_path, capsys), "zero_stage")
    assert zero["plan_file_only"] and "zero_stage 1 -> 3" in zero["in_input"]


def _ranked(text: str, n: int, field: str, folder: Path) -> list[Change]:
    """A TOML's changes of one setting, best first, as check ranks them (by its step time)."""
    plan = check_plan(torchtitan_config.load(_write("toml", text, folder), GPU[1], n))

    def step(job: Job, lay: Layout) -> float:
        return cost.estimate(job, lay).step_time_s

    choices = advice.memory_choices(plan.job, plan.require_layout(), DEFAULT_HEADROOM_PCT, step)
    return next(ranked for ranked in choices if ranked[0].field == field)
