"""GPUs a job uses of each NVLink domain (`ClusterSpec.domain_used`, `[cluster]
gpus_per_domain_used`): NVIDIA's MLPerf GB200/GB300 runs allocate Slurm segments of 16 four-GPU
trays, 64 GPUs of each 72-GPU rack (mlcommons/training_results_v5.1 @4da2d1cd
NVIDIA/benchmarks/llama31_8b/implementations/nemo/config_GB300_128x4x1xtp2pp1cp4_8b.sh:23-25:
DGXNNODES=128, DGXNGPU=4, SEGMENT=16), so rank r lies on rack r // 64."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.model import comms, placement
from planner.model.dispatch import Routing, fused_dispatch, moe_dispatch
from planner.model.stage_time import LAYER_TIMES
from planner.search.rules.feature_warnings import node_limited_routing
from planner.search.scaling import job_at, same_placement
from tests.search.brute_force import make_job

ROOT = Path(__file__).resolve().parents[2]


def _gb200(n: int, **cluster: int) -> comms.ClusterSpec:
    return make_job("llama3.1-8b", "gb200-nvl72", n, 8192, 1024, **cluster).cluster


@pytest.mark.parametrize(
    ("n", "used"),
    [
        (72, 72),  # one rack: its 18 trays, all 72 GPUs (the 18x4 configs)
        (144, 72),  # not a multiple of 64: whole racks
        (512, 64),  # 8 segments of 64 (the 128x4 configs, SEGMENT=16)
        (1152, 64),  # 18 x 64 (also 16 x 72: the segment default wins)
    ],
)
def test_the_default_is_the_catalogs_segment_for_multi_rack_jobs(n: int, used: int) -> None:
    assert _gb200(n).domain_used == used


def test_the_plan_overrides_and_8_gpu_nodes_keep_their_span() -> None:
    assert _gb200(1152, gpus_per_domain_used=72).domain_used == 72
    h100 = make_job("llama3.1-8b", "h100-sxm-80gb", 64, 8192, 128).cluster
    assert h100.domain_used == 8 and h100.placement_spans == (8, None)


@pytest.mark.parametrize("bad", [0, 80])
def test_out_of_range_is_refused_naming_field_and_value(bad: int) -> None:
    with pytest.raises(InputError, match=rf"gpus_per_domain_used.*{bad}"):
        _gb200(512, gpus_per_domain_used=bad)


def test_the_cli_exits_2_on_a_bad_value(tmp_path: Path) -> None:
    plan = (ROOT / "examples" / "llama3.1-8b-h100.toml").read_text()
    plan = plan.replace('gpu = "h100-sxm-80gb"', 'gpu = "h100-sxm-80gb"\ngpus_per_domain_used = 9')
    (tmp_path / "p.toml").write_text(plan)
    out = subprocess.run(
        [sys.executable, "-m", "planner", "check", str(tmp_path / "p.toml")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    assert "gpus_per_domain_used" in out.stderr and "9" in out.stderr


def test_ep32_on_512_gb200_stays_inside_a_64_gpu_segment() -> None:
    # 64 = 2 x 32: every EP 32 group (stride 1) lies in one segment, on NVLink; packed densely
    # on 72-GPU racks the group of ranks 64-95 would split 8 + 24 over two racks.
    grp = comms.place(_gb200(512), 1, 32)
    assert (grp.domains, grp.outer, grp.others) == (1, None, ())
    dense = comms.place(_gb200(512, gpus_per_domain_used=72), 1, 32)
    assert (dense.domains, dense.per_domain, dense.fewest) == (2, 24, 8)


def test_sizes_that_place_differently_do_not_share_layer_times() -> None:
    # 144 GPUs fill two whole racks (spans 72), 512 segments of 64: a TP 16 group straddles at
    # 144 (ranks 64-79), never at 512, so the layer times differ and are not shared.
    job = make_job("llama3.1-8b", "gb200-nvl72", 512, 8192, 1152)
    assert same_placement(job.cluster, job_at(job, 1024).cluster)
    assert not same_placement(job.cluster, job_at(job, 144).cluster)
    assert LAYER_TIMES.of(job_at(job, 1024)) is LAYER_TIMES.of(job)
    assert LAYER_TIMES.of(job_at(job, 144)) is not LAYER_TIMES.of(job)


def test_flex_takes_the_slowest_group_with_the_emptiest_domains_nic_share() -> None:
    # ep 32 on 1,152 densely packed GB200 (72 a rack): ranks 64-95 split 8 + 24; a rank of the
    # 8 has 24/32 of the experts off its rack (the aligned formula's (k-1)/k would say 1/2).
    c = _gb200(1152, gpus_per_domain_used=72)
    grp = comms.place(c, 1, 32)
    r = Routing(tokens=4096, hidden=4096, topk=8, experts=256)
    each = [fused_dispatch(c, g, r, 2.0, 2.0) for g in (replace(grp, others=()), *grp.others)]
    assert moe_dispatch(c, 1, 32, r, "flex", 1, 2.0, 2.0) == pytest.approx(2 * max(each))
    aligned = replace(grp, others=(), fewest=None)  # the same group priced as k = 2 even halves
    assert fused_dispatch(c, grp, r, 2.0, 2.0) > fused_dispatch(c, aligned, r, 2.0, 2.0)


def test_node_limited_routing_reads_the_group_over_fewest_racks() -> None:
    # etp 4, ep 32 on 1,152 densely packed GB200: block 384-511 spans 3 racks (12 + 18 + 2),
    # block 0-127 only 2 (18 + 14): group_topk 3 exceeds that group's 2 racks.
    job = make_job("deepseek-v3", "gb200-nvl72", 1152, 4096, 1152, gpus_per_domain_used=72)
    job = replace(job, moe_router_group_topk=3)
    lay = Layout(tp=4, pp=8, dp=36, cp=1, ep=32, etp=4, sequence_parallel=True)
    hit = node_limited_routing(job, lay)
    assert hit is not None and "the 2 nodes" in hit.message


@pytest.mark.parametrize(
    ("span", "stride", "size"), [(72, 4, 32), (64, 1, 32), (8, 1, 12), (72, 1, 16)]
)
def test_domain_counts_against_every_rank_placed(span: int, stride: int, size: int) -> None:
    # brute force: every group of the kind in a 1,152-rank job, rank r on domain r // span
    block, world = stride * size, 1152
    want = {
        len({r // span for r in range(b + o, b + block, stride)})
        for b in range(0, world, block)
        for o in range(stride)
    }
    assert placement.domain_counts((span, None), stride, size, world) == tuple(sorted(want))


def test_a_plans_override_is_written_back() -> None:
    # suggest --write-plan / launch headers render the plan: the override reads back as given
    import tomllib

    from planner.inputs import plan_writer
    from planner.inputs.plan import parse_plan

    doc = {
        "model": {"name": "llama3.1-8b"},
        "cluster": {"gpu": "gb200-nvl72", "num_gpus": 144, "gpus_per_domain_used": 48},
        "training": {"seq_length": 8192, "global_batch_size": 144},
        "parallel": {"tp": 4, "pp": 1, "micro_batch_size": 1},
    }
    plan = parse_plan(doc)
    text = plan_writer.render(plan.job, plan.require_layout(), {"name": "llama3.1-8b"}, ["t"])
    back = parse_plan(tomllib.loads(text))
    assert back.job.cluster.gpus_per_domain_used == 48 and back.job.cluster.domain_used == 48


def test_a_pools_override_is_written_back() -> None:
    # QA: suggest --write-plan dropped a pool's gpus_per_domain_used (its step 0.933 -> 0.894 s)
    import tomllib

    from planner.inputs import plan_writer
    from planner.inputs.plan import parse_plan

    pool = {"gpu": "gb200-nvl72", "num_gpus": 128, "gpus_per_domain_used": 4}
    doc = {
        "model": {"name": "llama3.1-8b"},
        "cluster": {"pools": [{"name": "a", **pool}, {"name": "b", **pool}]},
        "training": {"seq_length": 8192, "global_batch_size": 256},
        "parallel": {"tp": 4, "pp": 2, "micro_batch_size": 1},
    }
    plan = parse_plan(doc)
    text = plan_writer.render(plan.job, plan.require_layout(), {"name": "llama3.1-8b"}, ["t"])
    back = parse_plan(tomllib.loads(text))
    assert [p.cluster.gpus_per_domain_used for p in back.job.pools] == [4, 4]
