"""The legacy whole-parameter deal of Megatron's layer-wise optimizer (`Job.muon_whole_params`,
--no-use-layer-wise-param-layout): which data-parallel rank keeps which parameters' states.

Megatron-LM d98e8a64: without a parameter layout (training.py:2214-2219) the layer-wise
optimizer owns every parameter, Muon's and Adam's alike (optimizer/__init__.py:949-961, Adam's
built without the distributed optimizer), and `_shard_params_ping_pong`
(layer_wise_optimizer.py:713-762) sorts them by element count, ascending (:740), and deals
them in the order 0, 1, ..., dp-1, dp-1, ..., 0 over and over (:726, :744-754); the expert
parameters (their group's is_expert_parallel) in a deal of their own over the expert
data-parallel group. A rank keeps the states of the parameters dealt to it.

Planner lists a GPU's decoder matrices (`muon_layout.matrix_elements`' shapes) and its whole
word embedding and output layer; the other parameters (norms, biases: smaller than any matrix,
dealt first) it does not list, but counts (`param_tensors.rank_tensors`, less the expert
weights and biases and the learned positions), and their number sets where in the 0..dp-1..0
loop the listed ones start; their states it spreads evenly. (Learned positions, 2-D and not
tagged an embedding, language_module.py:229-236, are Muon's in Megatron and dealt whole; planner
spreads them at Adam's bytes. Mamba's in_proj, use_muon False, is Adam's and dealt whole;
planner counts it with the small ones.)
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.muon_layout import layer_shapes
from planner.model.param_tensors import rank_tensors
from planner.model.schedule import Chunks

Item = tuple[float, float]
"""(elements, state bytes per element) of one parameter."""


def ping_pong_max(items: Sequence[Item], dp: int, start: int | None = None) -> float:
    """State bytes of the fullest of dp ranks when `items` are sorted by elements (stably,
    ascending, :740) and dealt ping-pong (:726, :744-754) from position `start` of the loop
    (the number of smaller parameters dealt before them), or the most over every start."""
    loop = list(range(dp)) + list(range(dp))[::-1]
    period = len(loop)
    at_position = [0.0] * period
    for i, (numel, per) in enumerate(sorted(items, key=lambda item: item[0])):
        at_position[i % period] += numel * per
    worst = 0.0
    for first in range(period) if start is None else (start,):
        ranks = [0.0] * dp
        for j, held in enumerate(at_position):
            ranks[loop[(j + first) % period]] += held
        worst = max(worst, *ranks)
    return worst


def whole_params_bytes(
    job: Job,
    layout: Layout,
    at: tuple[int, Chunks],
    rest: tuple[float, float],
    words: tuple[float, int],
    per: tuple[float, float],
    shards: tuple[int, int],
) -> float:
    """Optimizer bytes on the fullest GPU of pipeline rank at[0] with decoder layers at[1]: its
    Muon matrices at per[0] bytes an element and `words` (elements, count) whole word embedding
    / output layer parameters at per[1] dealt whole (`ping_pong_max`) after the smaller
    parameters (module docstring), dense over shards[0] ranks and expert over shards[1]; the
    (dense, expert) `rest` elements at per[1] spread evenly."""
    rank, chunks = at
    muon, adam = per
    dense: list[Item] = [(words[0], adam)] * words[1]
    expert: list[Item] = []
    for chunk in chunks:
        for layer in chunk:
            d, e = layer_shapes(job, layout, layer)
            dense += [(r * c, muon) for r, c in d]
            expert += [(r * c, muon) for r, c in e]
    arch = job.arch
    linear = 2 if arch.add_bias_linear else 1
    positions = 1 if rank == 0 and arch.position_embedding_type == "learned_absolute" else 0
    small = rank_tensors(arch, layout, rank, chunks) - linear * len(expert) - len(dense)
    dp, edp = shards
    held = ping_pong_max(dense, dp, max(small - positions, 0))
    # the experts' biases, if any, come before their weights
    held += ping_pong_max(expert, edp, len(expert) if linear == 2 else 0)
    return held + adam * (rest[0] / dp + rest[1] / edp)
