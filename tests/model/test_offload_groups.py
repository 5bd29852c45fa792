"""Fine-grained offloading's reloads timed group by group (planner.model.offload_groups
`chunk_waits`, through planner.model.stage_offload `fine_offload_exposed`).

Oracle: a replay of Megatron's hooks written here from Megatron-LM d98e8a64
megatron/core/pipeline_parallel/fine_grained_activation_offload.py, stream by stream:
- a group's commit in the forward: the d2h stream waits for the compute (:1268), copies the group
  out (one stream, :472, :1098-1129) and pushes it on the chunk's reload stack (:1237);
- a group's start in the backward (its input): the h2d stream waits for the compute (:1341) and
  reloads the stack's top (:1271-1276), after its copy out (:1185), one stream (:473);
- a group's commit in the backward (its output): the compute waits for the first reload in
  flight of that name (:1302-1308); tensors still on the host are reloaded on the compute stream
  as autograd unpacks them (`tensor_pop`, :1063-1075), the host link taking one copy at a time;
- the chunk's first reload is issued in the backward before (:1278-1286) `lead` seconds before
  its backward starts (the planner's choice of lead, `chunk_waits`' docstring, is an input here);
- a chunk whose backward follows its forward keeps each name's last group (:1217-1225).
Layers are written by hand, in the order Megatron runs the groups (attention.py:1386-1395,
:1552-1629; transformer_layer.py:709-763, :819-830, :1109-1114; experts.py:928-1038).
"""

from __future__ import annotations

import random

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.model import host_link, stage_offload, stage_time
from planner.model.offload_groups import Chunk, Group, Item, chunk_waits


class _Replay:
    """Megatron's offload hooks over one chunk, each stream a clock. As in the source, a group
    reloaded at its use (`tensor_pop`, :1063-1075) waits for no copy out; planner's
    `offload_groups.Chunk` waits for it on purpose (its docstring: the source's data race), which
    changes nothing in the chunks these tests build."""

    def __init__(self, groups: list[Group]) -> None:
        self.groups = groups
        self.compute = self.d2h = self.h2d = 0.0
        self.stack: list[int] = []  # _groups_to_reload
        self.reloading: list[int] = []  # _reloading_group
        self.on_host: set[int] = set()
        self.out_event: dict[int, float] = {}
        self.reload_event: dict[int, float] = {}
        self.waited = 0.0

    def commit_forward(self, g: int) -> None:
        if not self.groups[g].moves:  # should_bulk_offload False: not pushed, stays on the GPU
            return
        self.d2h = max(self.d2h, self.compute) + self.groups[g].copy
        self.out_event[g] = self.d2h
        self.on_host.add(g)
        self.stack.append(g)

    def bulk_reload_group(self, g: int, issued: float) -> None:
        self.h2d = max(self.h2d, issued, self.out_event[g])
        if g in self.on_host:  # what tensor_pop took already is not copied again
            self.h2d += self.groups[g].copy
            self.on_host.discard(g)
        self.reload_event[g] = self.h2d
        self.reloading.append(g)

    def start_backward(self) -> None:
        if self.stack:
            self.bulk_reload_group(self.stack.pop(), self.compute)

    def commit_backward(self, g: int) -> None:
        before = self.compute
        name = self.groups[g].name
        for r in self.reloading:
            if self.groups[r].name == name:
                self.compute = max(self.compute, self.reload_event[r])
                self.reloading.remove(r)
                break
        if g in self.reload_event:  # its own reload, where another of its name was waited
            self.compute = max(self.compute, self.reload_event[g])
        if g in self.on_host:  # tensor_pop: reloaded on the compute stream at use
            self.compute = max(self.compute, self.h2d) + self.groups[g].copy
            self.h2d = self.compute
            self.on_host.discard(g)
        self.waited += self.compute - before

    def run(self, items: list[Item], gap: float, lead: float) -> float:
        for it in items:
            if it.what == "op":
                self.compute += it.fwd
            elif it.what == "commit":
                self.commit_forward(it.group)
        self.compute += gap
        if gap > 0 and self.stack:
            self.bulk_reload_group(self.stack.pop(), self.compute - min(gap, lead))
        for it in reversed(items):
            if it.what == "op":
                self.compute += it.bwd
            elif it.what == "start":
                self.start_backward()
            else:
                self.commit_backward(it.group)
        return self.waited


def _op(f: float) -> Item:
    return Item("op", f, 2 * f)  # a backward twice its forward


def _chunk(
    layers: int, template: list[tuple[str, object]], copies: dict[str, float]
) -> tuple[list[Item], list[Group]]:
    """`layers` copies of a layer's steps: ("op", forward seconds), ("start" | "commit", name)."""
    items: list[Item] = []
    groups: list[Group] = []
    for _ in range(layers):
        ids: dict[str, int] = {}
        for what, x in template:
            if what == "op":
                assert isinstance(x, float)
                items.append(_op(x))
                continue
            assert isinstance(x, str)
            if what == "start":
                ids[x] = len(groups)
                groups.append(Group(x, copies[x], True))
            items.append(Item(what, group=ids[x]))
    return items, groups


# core_attn and attn_proj back to back (attention.py:1605-1629), the MLP after
BACK_TO_BACK = [
    ("op", 1.0),
    ("start", "core_attn"),
    ("op", 2.0),
    ("commit", "core_attn"),
    ("start", "attn_proj"),
    ("op", 0.5),
    ("commit", "attn_proj"),
    ("op", 4.0),
]
# attn_norm from the layer's input to after the attention's residual add, nesting the others
NESTED = [
    ("start", "attn_norm"),
    ("op", 0.2),
    ("start", "qkv_linear"),
    ("op", 1.0),
    ("commit", "qkv_linear"),
    ("start", "core_attn"),
    ("op", 2.0),
    ("commit", "core_attn"),
    ("start", "attn_proj"),
    ("op", 0.5),
    ("commit", "attn_proj"),
    ("commit", "attn_norm"),
    ("op", 4.0),
]
# expert_fc1 and moe_act back to back (experts.py:928-941)
EXPERTS = [
    ("op", 3.0),
    ("start", "expert_fc1"),
    ("op", 1.5),
    ("commit", "expert_fc1"),
    ("start", "moe_act"),
    ("op", 1.5),
    ("commit", "moe_act"),
    ("op", 0.5),
]
ONE = [("op", 1.0), ("start", "core_attn"), ("op", 2.0), ("commit", "core_attn"), ("op", 4.0)]
COPIES = {
    "attn_norm": 0.3,
    "qkv_linear": 0.8,
    "core_attn": 1.2,
    "attn_proj": 0.6,
    "expert_fc1": 2.0,
    "moe_act": 2.5,
}


def _head(items: list[Item]) -> float:
    """The backward before a chunk's first group: `chunk_waits`' lead (its docstring)."""
    out = 0.0
    for it in items:
        if it.what == "start":
            return out
        out += it.bwd
    return out


@pytest.mark.parametrize("template", [BACK_TO_BACK, NESTED, EXPERTS, ONE])
@pytest.mark.parametrize("gap", [0.0, 3.0, 100.0])
def test_the_groups_replay_as_megatrons_hooks_run_them(
    template: list[tuple[str, object]], gap: float
) -> None:
    items, groups = _chunk(4, template, COPIES)
    if gap == 0:  # the backward follows the forward: each name's last group stays
        last = {g.name: i for i, g in enumerate(groups)}
        groups = [g._replace(moves=i not in last.values()) for i, g in enumerate(groups)]
    want = _Replay(groups).run(items, gap, _head(items))
    assert chunk_waits(items, groups, gap, False) == pytest.approx(want)


def _direct(items: list[Item], groups: list[Group], gap: float, behind: bool) -> float:
    """Brute force for `Chunk.waits`: the rules of planner.model.offload_groups' docstring run
    step by step on dicts and lists, every step visited, with the link's queue (`behind`)."""
    clock = d2h = head = 0.0
    ready: dict[int, float] = {}
    stack: list[int] = []
    opened = False
    for it in items:
        if it.what == "op":
            clock += it.fwd
            head += 0.0 if opened else it.bwd
        opened = opened or it.what == "start"
        if it.what == "commit" and groups[it.group].moves:
            d2h = max(d2h, clock) + groups[it.group].copy
            ready[it.group] = d2h
            stack.append(it.group)
    forward, tail = clock, max(d2h - clock, 0.0)
    clock += gap
    queued = clock + tail if behind else 0.0
    h2d = waits = 0.0
    done: dict[int, float] = {}
    back: set[int] = set()
    flight: list[int] = []

    def issue(g: int, at: float) -> None:
        nonlocal h2d
        h2d = done[g] = max(at, h2d, ready[g]) + (0.0 if g in back else groups[g].copy)
        flight.append(g)

    if gap > 0.0 and stack:
        issue(stack.pop(), clock - min(gap, head + (forward if behind else 0.0)))
    h2d = max(h2d, queued)
    for it in reversed(items):
        if it.what == "op":
            clock += it.bwd
        elif it.what == "start":
            if stack:
                issue(stack.pop(), clock)
                h2d = max(h2d, queued)
        else:
            g, until = it.group, clock
            match = next((x for x in flight if groups[x].name == groups[g].name), None)
            if match is not None:
                flight.remove(match)
                until = max(until, done[match])
            if g in done:
                until = max(until, done[g])
            elif groups[g].moves:
                until = max(until, h2d, ready[g]) + groups[g].copy
                h2d = until
                back.add(g)
            waits += until - clock
            clock = until
    return waits


def test_a_chunk_answers_every_gap_as_the_steps_run_one_by_one() -> None:
    # Oracle: `_direct`, bit for bit (the search's results must not move), on 400 chunks drawn
    # at random (seeded): 1-5 layers, each of one of the templates, op seconds scaled at random,
    # each group's copy drawn from 0-3 s and whether it moves at random (a name's pattern broken
    # where some stay), gaps 0, short and long, behind a forward or not: one `Chunk` answers
    # them all, in any order, its first reload issued or not.
    rng = random.Random(7)
    templates = [BACK_TO_BACK, NESTED, EXPERTS, ONE]
    for _ in range(400):
        items: list[Item] = []
        groups: list[Group] = []
        for _ in range(rng.randint(1, 5)):
            scale = rng.uniform(0.1, 3.0)
            layer, own = _chunk(1, rng.choice(templates), COPIES)
            for it in layer:
                at = it.group + len(groups) if it.group >= 0 else -1
                items.append(Item(it.what, it.fwd * scale, it.bwd * scale, at))
            for g in own:
                groups.append(g._replace(copy=rng.uniform(0.0, 3.0), moves=rng.random() < 0.8))
        chunk = Chunk(items, groups)
        for gap in (0.0, rng.uniform(0.0, 5.0), 100.0, rng.uniform(0.0, 5.0), 0.0):
            for behind in (False, True):
                assert chunk.waits(gap, behind) == _direct(items, groups, gap, behind)


def test_back_to_back_groups_show_the_first_ones_reload_whole() -> None:
    # core_attn then attn_proj: core_attn's reload is issued as attn_proj's backward ends and
    # waited for at once (the two are back to back): 4 layers x 1.2 s shows. attn_proj's comes
    # back under the MLP's and the next layer's first op's backward (8 + 2 s > 0.6 s), the
    # chunk's first under the backward before (a long gap). Lumped per layer (one copy of
    # 1.8 s under a layer's 15 s backward) nothing would show.
    items, groups = _chunk(4, BACK_TO_BACK, COPIES)
    assert chunk_waits(items, groups, 100.0, False) == pytest.approx(4 * 1.2)


def test_nested_norm_groups_bring_the_inner_groups_back_at_their_use() -> None:
    # attn_norm commits last (after the residual add): the stack's top is attn_norm, and the
    # backward reaches attn_proj's, core_attn's and qkv_linear's commits with no start between
    # to issue their reloads: each comes back at its use (0.6 + 1.2 + 0.8 s a layer). attn_norm's
    # own reloads: the chunk's first under the backward before; the others issued as the layer
    # after's attn_norm start (its input) ends, which is where this layer's backward begins
    # after its MLP (8 s > 0.3 s): hidden.
    items, groups = _chunk(4, NESTED, COPIES)
    assert chunk_waits(items, groups, 100.0, False) == pytest.approx(4 * (0.6 + 1.2 + 0.8))


def test_mixtral_core_attention_reload_shows_per_micro_batch() -> None:
    # Mixtral 8x7B on 64 H100, tp 2 pp 4 ep 8, offload core_attn and attn_proj, 4096 tokens a
    # micro-batch. core_attn copies Q, K, V (32 + 2 x 8) x 128 x 2 = 12,288 bytes a token and the
    # flash output 32 x 128 x 2 = 8,192 (attn_proj copies the output again, released once):
    # 20,480 bytes a token over TP 2, 4096 x 10,240 = 41.9 MB a layer, over one H100's share of
    # its PCIe 5 switch uplink at 80% (64 / 2 x 0.8 = 25.6 GB/s, host_link): 1.638 ms. Back to
    # back with attn_proj, its reload shows whole: 8 layers a rank, 13.1 ms a micro-batch on
    # ranks 0-2. attn_proj's (0.66 ms) comes back under the MoE block's backward; the copies out
    # (2.3 ms a layer) keep up with the forward, so nothing queues. The last rank's one chunk
    # keeps its last layer's groups (its backward follows its forward): every reload there is
    # issued a layer early and hides.
    j = job("mixtral-8x7b", "h100-sxm-80gb", 64, 4096, 256)
    lay = Layout(tp=2, pp=4, dp=8, ep=8, sequence_parallel=True)
    lay = lay.with_(offload_modules=("core_attn", "attn_proj"))
    t = stage_time.layout_times(j, lay)
    assert host_link.host_link_bandwidth(j) == pytest.approx(25.6e9)
    core = 4096 * 20480 / 2 / 25.6e9
    shown = [
        stage_offload.fine_offload_exposed(j, lay, rank, chunks, t)
        for rank, chunks in enumerate(lay.chunk_layers(32))
    ]
    assert shown[:3] == pytest.approx([8 * core] * 3)
    assert shown[3] == pytest.approx(0.0, abs=1e-9)
