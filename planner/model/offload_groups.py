"""Fine-grained activation offloading's groups on one chunk's timeline, group by group, as
Megatron's streams run them (NVIDIA/Megatron-LM d98e8a64, megatron/core/pipeline_parallel/
fine_grained_activation_offload.py; `planner.model.stage_offload.fine_offload_exposed` sums the
chunks).

Each listed module opens a group at its input (`FineGrainedOffloadingGroupStartFunction`,
:1439-1461) and commits it at its output (`FineGrainedOffloadingGroupCommitFunction`,
:1357-1387). The rule, per group g:

- Forward: at g's commit the copy stream waits for the compute (:1268) and copies g's tensors
  out (`bulk_offload_group`, one d2h stream, :472, :1098-1129), and g goes on top of the chunk's
  reload stack (`_groups_to_reload.append`, :1237): the stack holds the groups in commit order.
- Backward, at g's commit (its output, where its backward starts): the compute waits for the
  first reload in flight that bears g's name (:1302-1308). A group whose tensors no reload has
  brought back yet is reloaded when autograd unpacks them, on the compute stream (`tensor_pop`,
  :1063-1075): the whole copy shows.
- Backward, at g's start (its input, where its backward ends): the reload stream waits for the
  compute (:1341) and reloads the group on top of the stack (`bulk_reload`, :1271-1276), after
  its copy out (:1185), one h2d stream (:473); with the stack empty, the top of the next chunk
  to run its backward, where that chunk's forward is done (:1278-1286, `pre_reload_last_layer`).
So a group's reload is issued where the backward leaves the group after it on the stack (in
commit order) and waited for where its own backward starts: it hides under the backward of
what lies between the two and no more. The wait pairs by name only: where the starts and the
stack fall out of step (a group kept on the GPU, by the offload fraction or the last-layer rule,
that breaks a layer's pattern), a group's backward waits for the next layer's reload of its name,
just issued. Core attention and the output projection are back to
back (attention.py:1605-1629, the output gate between), as are expert_fc1 and moe_act
(experts.py:928-941): with both listed the first one's reload is issued just as it is needed.
attn_norm and mlp_norm commit after their block's residual add (transformer_layer.py:759-763,
:1109-1114), after the groups inside the block: their starts in the backward then issue the
reloads one group late, and the block's inner groups come back at their use.

A chunk's first reload (the top of its stack) is issued in the backward before, as that
chunk's first group's backward ends: it has the rest of that backward (taken as this chunk's
own head, the compute before its first group) and, in 1F1B's steady state, the forward of the
micro-batch in between (taken as this chunk's own) to hide under, at most the time since this
chunk's forward ended. The last rank's last chunk (no gap: its backward follows its forward)
keeps each name's last group on the GPU (`should_bulk_offload`, :1217-1225) and has no such
reload.

The compute between groups (`layer_items`): a layer's forward and backward seconds split over
its sub-blocks by their forward FLOPs per token (`op_weights`: the QKV projections, the core
attention's computed scores, the output projection; a dense MLP; the routed experts' fc1 and
fc2 and the shared experts; another mixer whole), a backward costing each sub-block the same
multiple of its forward (2 for a GEMM's dgrad and wgrad); the norms, rotary embedding, gate and
residual adds carry no FLOPs and get none. The waits on other links the copies run under
(`stage_offload.copy_windows`) sit where they happen: EP's all-to-all half at the dispatch, half
at the combine (between mlp_norm's start and the experts, after the experts), CP's exchange in
core attention, TP's spread with the FLOPs. Not modelled: the first backward chunk of an
iteration keeping each name's last group (`post_warmup_callback`'s offload margin, :622-639,
one chunk in m x vpp)."""

from __future__ import annotations

from typing import NamedTuple

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind
from planner.model.attention import computed_keys
from planner.model.flops import (
    attention_core_width,
    dense_mlp_forward,
    layer_forward,
    mlp_matrices,
    moe_mlp_forward,
)
from planner.model.gemm_shapes import attention_gemms


class Item(NamedTuple):
    """One step of a chunk's forward, in order: "op", compute of `fwd` and `bwd` seconds;
    "start" or "commit", a group's (`group`, its index in the chunk's groups) start or commit."""

    what: str
    fwd: float = 0.0
    bwd: float = 0.0
    group: int = -1


class Group(NamedTuple):
    """One offload group of a chunk: its module's name, its copy's seconds one way, and whether
    it moves (Megatron's `group.offload` and `should_bulk_offload`)."""

    name: str
    copy: float
    moves: bool


def op_weights(arch: ModelArch, kind: LayerKind, seq: int) -> dict[str, float]:
    """A layer's sub-blocks and their forward FLOPs per token (module docstring): "qkv", "core"
    (the scores the causal kernel computes, `attention.computed_keys`), "proj"; "mixer" (a
    Mamba or gated-delta mixer); "mlp"; "fc1", "fc2" (the routed experts), "shared" (the
    shared experts and a latent MoE's projections)."""
    w: dict[str, float] = {}
    if kind.mixer == "attention":
        flops = [2.0 * k * n * c for _, k, n, c in attention_gemms(arch, 1.0, 1)]
        window = arch.window_size if kind.window else None
        keys, _ = computed_keys(seq, window)
        qk, v = attention_core_width(arch)
        w["qkv"], w["core"], w["proj"] = sum(flops[:-1]), 2.0 * keys * (qk + v), flops[-1]
    ffn = 0.0
    if kind.ffn == "dense":
        ffn = w["mlp"] = dense_mlp_forward(arch)
    elif kind.ffn == "moe":
        routed = arch.moe_router_topk * arch.expert_ffn * arch.expert_hidden
        w["fc1"] = 2.0 * (mlp_matrices(arch) - 1) * routed
        w["fc2"] = 2.0 * routed
        ffn = moe_mlp_forward(arch)
        w["shared"] = max(ffn - w["fc1"] - w["fc2"], 0.0)
    if kind.mixer is not None and kind.mixer != "attention":
        w["mixer"] = max(layer_forward(arch, seq, kind) - ffn, 0.0)
    return w


_ATTENTION = (
    ("start", "attn_norm"),
    ("start", "qkv_linear"),
    ("op", "qkv"),
    ("commit", "qkv_linear"),
    ("start", "core_attn"),
    ("op", "core"),
    ("commit", "core_attn"),
    ("start", "attn_proj"),
    ("op", "proj"),
    ("commit", "attn_proj"),
    ("commit", "attn_norm"),
)
"""An attention block's groups and sub-blocks in forward order (attention.py:1386-1395,
:1552-1607, :1626-1629; the input norm's group committed after the residual add,
transformer_layer.py:709-723, :759-763)."""

_MOE = (
    ("start", "mlp_norm"),
    ("op", "dispatch"),
    ("start", "fused_group_mlp"),
    ("start", "expert_fc1"),
    ("op", "fc1"),
    ("commit", "expert_fc1"),
    ("start", "moe_act"),
    ("op", "fc2"),
    ("commit", "moe_act"),
    ("commit", "fused_group_mlp"),
    ("op", "combine"),
    ("op", "shared"),
    ("commit", "mlp_norm"),
)
"""An MoE block's (experts.py:787-823, :928-1038; the pre-MLP norm's group committed after the
residual add, transformer_layer.py:819-830, :1109-1114)."""


def layer_items(
    arch: ModelArch,
    kind: LayerKind,
    seq: int,
    windows: tuple[float, float],
    waits: tuple[float, float, float],
    groups: dict[str, int],
) -> list[Item]:
    """One layer's steps (`Item`) in forward order: `windows`, its forward and backward compute
    seconds; `waits`, its TP, CP and EP all-to-all seconds the copies run under (split between
    forward and backward as the compute is); `groups`, the index of each of its groups by name
    (the others it does not open)."""
    fwd, bwd = windows
    tp_w, cp_w, a2a = waits
    weights = op_weights(arch, kind, seq)
    total = sum(weights.values())
    if total <= 0.0:
        weights, total = {"mixer": 1.0}, 1.0
    # the waits on other links: EP's at the dispatch and combine, CP's in core attention, TP's
    # (and any with no such place in this layer) with the FLOPs
    spread = tp_w + (0.0 if "core" in weights else cp_w) + (0.0 if "fc1" in weights else a2a)
    placed = {name: x / total * spread for name, x in weights.items()}
    if "core" in weights:
        placed["core"] += cp_w
    if "fc1" in weights:
        placed["dispatch"] = placed["combine"] = a2a / 2
    f_share = fwd / (fwd + bwd) if fwd + bwd > 0.0 else 0.5

    def step(name: str) -> Item:
        x = weights.get(name, 0.0) / total
        wait = placed.get(name, 0.0)
        return Item("op", fwd * x + wait * f_share, bwd * x + wait * (1.0 - f_share))

    steps: list[tuple[str, str]] = []
    if kind.mixer == "attention":
        steps += _ATTENTION
    elif kind.mixer is not None:
        steps.append(("op", "mixer"))
    if kind.ffn == "dense":
        steps.append(("op", "mlp"))
    elif kind.ffn == "moe":
        steps += _MOE
    out = []
    for what, name in steps:
        if what == "op":
            out.append(step(name))
        elif name in groups:
            out.append(Item(what, group=groups[name]))
    return out


def chunk_waits(items: list[Item], groups: list[Group], gap: float, behind: bool) -> float:
    """Seconds one chunk's backward waits on its reloads (module docstring): `items`, its steps
    in forward order; `groups`, its groups; `gap`, the seconds between the end of its forward and
    the start of its backward. `Chunk.waits`, for one call."""
    return Chunk(items, groups).waits(gap, behind)


class Chunk:
    """One chunk's steps (`items`, in forward order) and groups, with what its forward leaves
    for the backward, which reads neither the gap nor the rank: the search asks `waits` of the
    same chunk on every rank and layout that run it (`stage_offload.fine_offload_exposed`). The
    copies out queue from an empty queue.

    A departure from the source, on purpose: a group reloaded at its use on the compute stream
    (`_Event` kind 2) starts its reload no earlier than its copy out is done. Megatron's
    `tensor_pop` -> `reload` (:1063-1075, :937-952) waits on no event there; only
    `bulk_reload_group` (:1182-1184) and the max-inflight drain wait on the offload event, so
    the source's path can read a host buffer the copy out has not yet filled (a data race), which
    no plan should count on. It changes no result in the patterns `stage_offload._kept` produces
    (a review's brute force over random chunks and fractions: 0 of 8,000 differ)."""

    __slots__ = (
        "_forward",
        "_head",
        "_names",
        "_programs",
        "_ready",
        "_stack",
        "_steps",
        "_tail",
        "copies",
        "groups",
        "span",
        "spans",
    )

    def __init__(self, items: list[Item] | tuple[Item, ...], groups: list[Group]) -> None:
        self.groups = tuple(groups)
        self.spans = tuple(it.fwd + it.bwd for it in items)  # each step's compute, both ways
        self.span = sum(self.spans)
        self.copies = tuple(g.copy for g in groups if g.moves)  # one way, in open order
        clock = d2h = 0.0
        ready: dict[int, float] = {}
        stack: list[int] = []
        head = 0.0  # the backward of what runs before the chunk's first group
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
        self._ready, self._stack, self._head, self._forward = ready, tuple(stack), head, clock
        self._tail = max(d2h - clock, 0.0)  # the copies out still queued as the forward ends
        # the backward's steps, in its order: (0, its seconds, -1) compute, (1, 0.0, group) a
        # start, (2, 0.0, group) a commit
        code = {"op": 0, "start": 1, "commit": 2}
        self._steps = tuple((code[it.what], it.bwd, it.group) for it in reversed(items))
        self._names = tuple(g.name for g in groups)
        self._programs: dict[bool, tuple[int, tuple[_Event, ...]]] = {}

    def waits(self, gap: float, behind: bool) -> float:
        """Seconds the chunk's backward waits on its reloads: `gap`, the seconds between the end
        of its forward and the start of its backward. Both directions go through one pipe, in
        order: `behind`, the backward follows another micro-batch's forward, whose copies out
        (taken as this forward's) still hold the link for this forward's tail as it starts: the
        chunk's first reload, issued before that forward (:1278-1286), goes ahead of them, the
        later ones queue behind them. Runs `_program`'s events on the clock."""
        first = gap > 0.0
        program = self._programs.get(first)
        if program is None:
            program = self._programs[first] = self._program(first)
        top, events = program
        # max(a, b) written out (the same choice: the first of equals): the search's hot loop
        clock = self._forward + gap
        queued = clock + self._tail if behind else 0.0  # when the link is through with them
        h2d = 0.0
        done = [0.0] * len(self.groups)
        if top >= 0:  # the first reload, issued in the backward before
            at = clock - min(gap, self._head + (self._forward if behind else 0.0))
            h2d = done[top] = max(at, h2d, self._ready[top]) + self.groups[top].copy
        if queued > h2d:
            h2d = queued
        waits = 0.0
        for kind, bwds, g, m, ready, copy in events:
            for b in bwds:
                clock += b
            if kind == 0:  # a reload issued, after the compute, the link and its copy out
                start = clock
                if h2d > start:
                    start = h2d
                if ready > start:
                    start = ready
                h2d = done[g] = start + copy  # past `queued` already: h2d only grows
                continue
            until = clock
            if m >= 0 and done[m] > until:  # the first reload in flight of g's name
                until = done[m]
            if kind == 1:
                if g >= 0 and g != m and done[g] > until:  # g's own reload
                    until = done[g]
            else:  # no reload brought it back: the compute stream reloads it
                if h2d > until:
                    until = h2d
                if ready > until:
                    until = ready
                until += copy
                h2d = until
            waits += until - clock
            clock = until
        return waits

    def _program(self, first: bool) -> tuple[int, tuple[_Event, ...]]:
        """The backward's reloads and waits, which read no time (module docstring): the group
        whose reload is issued in the backward before (-1: none; `first`, the gap is not 0),
        and the events the backward meets in order (`_Event`), each after the compute of its
        `bwds`. A start with the stack empty, a commit with nothing to wait for and the compute
        after the last event change no wait: they are left out."""
        groups, ready, names = self.groups, self._ready, self._names
        stack = list(self._stack)
        issued: set[int] = set()
        back: set[int] = set()  # reloaded at their use
        # per name, the reloads issued and not yet waited for, in issue order
        flight: dict[str, list[int]] = {}
        top = -1
        if first and stack:
            top = stack.pop()
            issued.add(top)
            flight.setdefault(names[top], []).append(top)
        events: list[_Event] = []
        bwds: list[float] = []
        for what, bwd, g in self._steps:
            if what == 0:
                bwds.append(bwd)
                continue
            if what == 1:
                if stack:
                    x = stack.pop()
                    copy = 0.0 if x in back else groups[x].copy
                    events.append((0, tuple(bwds), x, -1, ready[x], copy))
                    bwds = []
                    issued.add(x)
                    flight.setdefault(names[x], []).append(x)
                continue
            mine = flight.get(names[g])
            m = mine.pop(0) if mine else -1
            if g in issued:
                events.append((1, tuple(bwds), g, m, 0.0, 0.0))
            elif groups[g].moves:
                events.append((2, tuple(bwds), g, m, ready[g], groups[g].copy))
                back.add(g)
            elif m >= 0:
                events.append((1, tuple(bwds), -1, m, 0.0, 0.0))
            else:
                continue
            bwds = []
        return top, tuple(events)


_Event = tuple[int, tuple[float, ...], int, int, float, float]
"""One event of a chunk's backward (`Chunk._program`): (kind, the compute seconds before it,
group, the group whose reload it waits for by name or -1, ready, copy). Kind 0: the group's
reload is issued, not before its copy out is done (`ready`), taking `copy` seconds (0 for a group
already reloaded at its use); 1: the group's commit (-1: one with no reload of its own) waits for
the reloads; 2: the group's commit, with no reload issued, reloads it on the compute stream."""
