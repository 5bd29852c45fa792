"""planner's gated-delta-net kernel time against FLA's measured chunked kernels on GB200.

Data: benchmarks/data/fla_kernels/ (flash-linear-attention's README benchmark: `chunk_gdn`, FLA's
chunked gated delta rule with the q / k L2 norms inside the call, forward alone and forward with
backward, six shapes on one GB200; the data README says what and where from).

A call's time is the host's launch of its Triton kernels plus their work: at small shapes the
GPU waits on the launches (0.6 ms forward, 1.5 ms forward and backward at any size here), and
the work grows with the token-heads (batch x sequence x heads). So the comparison is on the
slope: a least-squares line of time over token-heads through the four head-dim-128 shapes (the
head dim of Qwen3-Next and Qwen3.5) gives the intercept (the launches) and the seconds per
token-head, which `planner.model.gdn.scan_time` (with the L2 norms' HBM bytes the op adds,
`l2norm_bytes`) predicts for the same head dims. The host side of a training step is
`planner.model.host` (GDN_ISSUE), not this.

    python benchmarks/linear_kernels.py          # the slopes, the fraction, every row
    python benchmarks/linear_kernels.py --fit    # also the backward fraction to paste

Then, as a comparison (no fit), planner's Mamba-2 scan at the same head dim against FLA's
retention and GLA kernels (`mamba_proxy`): no benchmark of the mamba_ssm SSD kernels Megatron
runs is stored, and these bracket SSD's work (2026-12-05: planner's scan 0.31 / 0.88 ns a
token-head forward / backward, under retention's measured 0.44 / 2.13).

`--fit` prints the fraction of its roofline the backward sustains (planner's roofline seconds per
token-head over the measured slope): `planner.model.gdn.BWD_ROOFLINE_FRACTION`. The forward's
(also printed) is about 1, and taken as 1.
"""

from __future__ import annotations

import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.inputs.arch import ModelArch
from planner.inputs.plan import parse_plan
from planner.model import gdn, mamba
from planner.model.gemm import Gpu
from planner.model.layer_time import gpu_of

DATA = Path(__file__).parent / "data" / "fla_kernels" / "chunk_ops_gb200.csv"
OP = "chunk_gdn"
FIT_HEAD_DIM = 128
"""The head dim of the shapes the slopes are fitted on (four of the table's six)."""

L2NORM_ELEMENTS = (4.0, 6.0)
"""Key-side elements per token and head the op's L2 norms of q and k move, forward (read q and k,
write them normalised) and backward (read the normalised q and k and their gradients, write the
input gradients), 2 bytes each (FLA fla/modules/l2norm.py; the fp32 norms, one per row, left
out)."""


@dataclass(frozen=True)
class Row:
    mode: str
    batch: int
    seq: int
    heads: int
    head_dim: int
    ms: float

    @property
    def token_heads(self) -> float:
        return float(self.batch * self.seq * self.heads)


def load(op: str = OP) -> list[Row]:
    with DATA.open(newline="") as fh:
        return [_row(r) for r in csv.DictReader(fh) if r["op"] == op]


def _row(r: dict[str, str]) -> Row:
    shape = (int(r["B"]), int(r["T"]), int(r["H"]), int(r["D"]))
    return Row(r["mode"], *shape, float(r["median_ms"]))


def gb200() -> tuple[ModelArch, Gpu]:
    """The zoo's Qwen3-Next on one GB200: the architecture the kernel's head counts and dims are
    set on (`arch_for`) and the GPU as the roofline sees it."""
    doc = {
        "model": {"name": "qwen3-next-80b-a3b"},
        "cluster": {"gpu": "gb200-nvl72", "num_gpus": 1},
        "training": {"seq_length": 4096, "global_batch_size": 1},
        "parallel": {"micro_batch_size": 1},
    }
    job = parse_plan(doc, DATA).job
    return job.arch, gpu_of(job)


def arch_for(base: ModelArch, heads: int, head_dim: int) -> ModelArch:
    """The benchmark's kernel: q, k and v each `heads` heads of `head_dim`."""
    return base.model_copy(
        update={
            "linear_num_key_heads": heads,
            "linear_num_value_heads": heads,
            "linear_key_head_dim": head_dim,
            "linear_value_head_dim": head_dim,
        }
    )


def l2norm_bytes(head_dim: int) -> tuple[float, float]:
    """HBM bytes per token-head of the op's q / k L2 norms, forward and backward."""
    fwd, bwd = L2NORM_ELEMENTS
    return 2.0 * fwd * head_dim, 2.0 * bwd * head_dim


def predicted_per_token_head(base: ModelArch, gpu: Gpu, head_dim: int) -> tuple[float, float]:
    """planner's seconds per token-head of the op, forward and backward (one head on a long
    sequence, so the per-token terms dominate), the L2 norms included."""
    tokens = 1e6
    fwd, bwd = gdn.scan_time(arch_for(base, 1, head_dim), gpu, tokens, 1)
    l2_fwd, l2_bwd = l2norm_bytes(head_dim)
    return fwd / tokens + l2_fwd / gpu.hbm, bwd / tokens + l2_bwd / gpu.hbm


def line(rows: list[Row]) -> tuple[float, float]:
    """Least-squares (intercept seconds, seconds per token-head) through the rows."""
    a = np.array([[1.0, r.token_heads] for r in rows])
    y = np.array([r.ms / 1e3 for r in rows])
    intercept, slope = np.linalg.lstsq(a, y, rcond=None)[0]
    return float(intercept), float(slope)


def measured_slopes(rows: list[Row]) -> dict[str, tuple[float, float]]:
    """(intercept, slope) of the forward, the forward with backward and the backward alone (their
    difference), on the FIT_HEAD_DIM rows."""
    fit = [r for r in rows if r.head_dim == FIT_HEAD_DIM]
    fwd = line([r for r in fit if r.mode == "fwd"])
    both = line([r for r in fit if r.mode == "fwdbwd"])
    return {"fwd": fwd, "fwdbwd": both, "bwd": (both[0] - fwd[0], both[1] - fwd[1])}


def roofline_fractions(rows: list[Row]) -> tuple[float, float]:
    """The forward's and the backward's roofline seconds per token-head (`scan_time` with the
    roofline fraction at 1) over the measured slopes less the L2 norms' (memory-bound kernels
    at the achieved bandwidth, as planner times every elementwise pass)."""
    base, gpu = gb200()
    fwd, bwd = gdn.scan_time(arch_for(base, 1, FIT_HEAD_DIM), gpu, 1.0, 1)
    bwd *= gdn.BWD_ROOFLINE_FRACTION  # the backward's roofline itself
    l2_fwd, l2_bwd = (b / gpu.hbm for b in l2norm_bytes(FIT_HEAD_DIM))
    slopes = measured_slopes(rows)
    return fwd / (slopes["fwd"][1] - l2_fwd), bwd / (slopes["bwd"][1] - l2_bwd)


def predicted_ms(row: Row, intercepts: dict[str, tuple[float, float]]) -> float:
    """The row's time as the fitted launch intercept plus planner's work at its shape."""
    base, gpu = gb200()
    fwd, bwd = predicted_per_token_head(base, gpu, row.head_dim)
    work = fwd if row.mode == "fwd" else fwd + bwd
    return 1e3 * (intercepts[row.mode][0] + work * row.token_heads)


PROXY_OPS = ("chunk_retention", "chunk_gla")
"""FLA's chunked kernels the Mamba-2 mixer's scan is compared with (`mamba_proxy`)."""


def mamba_proxy(base: ModelArch, gpu: Gpu) -> None:
    """A comparison, not a fit: planner's Mamba-2 scan (`planner.model.mamba.scan_time`, the
    mamba_ssm SSD kernels Megatron runs, of which no benchmark is stored) per token-head at the
    shape of FLA's head-dim-128 rows (state and head dim 128, B and C per head), against the
    measured slopes of FLA's retention (a fixed decay: less work than SSD's per-token decay) and
    GLA (a per-channel decay: more) kernels on the same GB200."""
    arch = base.model_copy(
        update={
            "hidden_size": 1024,
            "mamba_num_heads": 16,
            "mamba_head_dim": FIT_HEAD_DIM,
            "mamba_num_groups": 16,
            "mamba_state_dim": FIT_HEAD_DIM,
        }
    )
    tokens = 1e6
    fwd, bwd = mamba.scan_time(arch, gpu, tokens, 1)
    per = tokens * arch.mamba_heads
    print(
        f"Mamba-2 scan at head dim {FIT_HEAD_DIM} (planner): forward {fwd / per * 1e9:.3f}, "
        f"backward {bwd / per * 1e9:.3f} ns a token-head"
    )
    for op in PROXY_OPS:
        slopes = measured_slopes(load(op))
        print(
            f"  FLA {op:16s} measured: forward {slopes['fwd'][1] * 1e9:.3f}, backward "
            f"{slopes['bwd'][1] * 1e9:.3f} ns a token-head"
        )


def main(argv: list[str]) -> None:
    rows = load()
    slopes = measured_slopes(rows)
    base, gpu = gb200()
    print(
        f"FLA {OP} on GB200 (benchmarks/data/fla_kernels), lines through the head-dim-"
        f"{FIT_HEAD_DIM} shapes: intercept ms, ns per token-head, planner's ns per token-head"
    )
    model = predicted_per_token_head(base, gpu, FIT_HEAD_DIM)
    for mode, (a, b) in slopes.items():
        mine = {"fwd": model[0], "bwd": model[1], "fwdbwd": sum(model)}[mode]
        print(
            f"  {mode:7s} intercept {a * 1e3:6.3f} ms  measured {b * 1e9:6.3f}  "
            f"planner {mine * 1e9:6.3f} ns  ({mine / b - 1:+.1%})"
        )
    print()
    print(
        f"{'mode':7s} {'B':>3s} {'T':>6s} {'H':>4s} {'D':>4s} {'measured':>9s} "
        f"{'predicted':>9s} {'error':>7s}"
    )
    errors = []
    for r in rows:
        p = predicted_ms(r, slopes)
        errors.append(p / r.ms - 1)
        print(
            f"{r.mode:7s} {r.batch:3d} {r.seq:6d} {r.heads:4d} {r.head_dim:4d} {r.ms:9.3f} "
            f"{p:9.3f} {p / r.ms - 1:+7.1%}"
        )
    fit = [abs(e) for e, r in zip(errors, rows, strict=True) if r.head_dim == FIT_HEAD_DIM]
    print(
        f"head dim {FIT_HEAD_DIM}: median |error| {statistics.median(fit):.1%}, "
        f"worst {max(fit):.1%} (n={len(fit)}); every row: median "
        f"{statistics.median(abs(e) for e in errors):.1%}"
    )
    print()
    mamba_proxy(base, gpu)
    if "--fit" in argv:
        f_fwd, f_bwd = roofline_fractions(rows)
        print(
            f"\nroofline fraction sustained: forward {f_fwd:.3f} (taken as 1), backward {f_bwd:.3f}"
        )
        print(f"BWD_ROOFLINE_FRACTION = {f_bwd:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
