"""torchtitan's float8 on llama4 in a job config TOML: its filter is read, not a crash.

Oracles (pytorch/torchtitan e347b1e5): llama4 runs the float8 linear converter
(models/llama4/infra/parallelize.py:93; its own train_configs/llama4_17bx16e.toml:64-67 sets
`[quantize.linear.float8] filter_fqns = ["output", "router.gate"]`); its decoder's nn.Linear
modules are attention.wq, wk, wv, wo (models/llama4/model/model.py:206-211), a dense layer's
feed_forward.w1, w2, w3 (:332-334) and an MoE layer's moe.shared_experts.w1, w2, w3
(models/moe/moe.py:63-65, :445-446), every layer MoE in 17bx16e (llama4/__init__.py:49,
interleave_moe_layer_step = 1); a module stays bf16 where a filter entry is a substring of its
name (components/quantization/utils.py:10-27). planner crashed with "internal error: KeyError:
'llama4'" on every llama4 float8 TOML before."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planner.inputs import torchtitan_config, torchtitan_float8
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan

TOML = """[model]
name = "llama4"
flavor = "17bx16e"
converters = ["quantize.linear.float8"]
[training]
local_batch_size = 1
global_batch_size = 64
seq_len = 8192
[parallelism]
data_parallel_shard_degree = 64
expert_parallel_degree = 8
[activation_checkpoint]
mode = "full"
[compile]
enable = true
[quantize.linear.float8]
filter_fqns = {fqns}
"""


def _read(tmp_path: Path, fqns: str) -> Plan:
    path = tmp_path / "llama4.toml"
    path.write_text(TOML.format(fqns=fqns))
    return torchtitan_config.load(path, "h100-sxm-80gb", 64)


def test_llama4s_own_filter_reads_as_float8(tmp_path: Path) -> None:
    plan = _read(tmp_path, '["output", "router.gate"]')
    assert plan.job.precision == "fp8"
    assert not any("router" in message for _, message in plan.inert)  # the gate is filtered


def test_a_filter_keeping_the_shared_experts_in_bf16_is_refused(tmp_path: Path) -> None:
    """The entry "shared_experts" keeps layers.<i>.moe.shared_experts.w1-w3 in bf16 and leaves the
    attention's wq to float8: float8 on some decoder linears and not others."""
    needle = "keeps layers.0.moe.shared_experts.w1 in bf16 and converts layers.0.attention.wq"
    with pytest.raises(InputError, match=needle):
        _read(tmp_path, '["output", "router.gate", "shared_experts"]')


def test_a_model_without_a_linears_entry_exits_2_naming_it() -> None:
    needle = re.escape('job.toml: model.name: "mixtral": planner does not know')
    with pytest.raises(InputError, match=needle):
        torchtitan_float8.float8_filter("job.toml", "mixtral", 2, ["output"])
