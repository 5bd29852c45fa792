"""A replay of one Megatron pipeline rank's interleaved schedule, tensor by tensor: the oracle of
tests/model/test_p2p_held.py (the p2p overlap, Megatron's default) and
tests/model/test_p2p_blocking_held.py (without it, and under the EP overlap's merged op).
Written from Megatron-LM d98e8a64 megatron/core/pipeline_parallel/schedules.py by hand (each
test module's docstring says which lines); the peak over every moment of the kept activations
plus one message per live pipeline tensor."""

from __future__ import annotations


class Rank:
    """One rank's live pipeline tensors and kept activations, the peak over every moment."""

    def __init__(self, msg: float) -> None:
        self.msg, self.acts, self.peak = msg, 0.0, 0.0
        self.live: set[tuple[str, int]] = set()

    def add(self, tag: tuple[str, int]) -> None:
        self.live.add(tag)
        self.snap()

    def drop(self, tag: tuple[str, int]) -> None:
        self.live.discard(tag)
        self.snap()

    def snap(self) -> None:
        self.peak = max(self.peak, self.acts + self.msg * len(self.live))


def replay(
    kept: tuple[float, ...],
    pp: int,
    vpp: int,
    r: int,
    m: int,
    g: int,
    msg: float,
    overlap: bool,
    merged: bool,
) -> float:
    table = [
        (i, c)
        for lo in range(0, m, g)
        for c in range(vpp)
        for i in range(lo, m if lo + g >= m else lo + g)
    ]
    index = {e: n for n, e in enumerate(table)}
    total = m * vpp
    first, last = r == 0, r == pp - 1
    warm = min(2 * (pp - r - 1) + (vpp - 1) * g + merged, total)
    steady = total - warm
    st = Rank(msg)

    def receive(v: int, leading: bool, forward: bool) -> None:
        if v == total - 1 and forward:
            return
        if leading:
            if v < pp - 1:
                return
            i, c = table[v - (pp - 1)]
            if c == vpp - 1:  # the ending rank's last chunk sends nothing on
                return
            consumer = index[(i, c + 1)]
        else:
            consumer = v + 1
        st.add(("X" if forward else "G", consumer))

    def take_input(f: int) -> int:
        c = table[f][1]
        if not (first and c == 0):
            assert ("X", f) in st.live, (f, r)
            st.live.discard(("X", f))
        return c

    def forward(f: int) -> None:
        c = take_input(f)
        st.acts += kept[c]
        st.snap()
        if not (last and c == vpp - 1):
            st.add(("O", f))

    def backward(b: int) -> None:
        cb = vpp - 1 - table[b][1]
        st.acts -= kept[cb]
        if not (first and cb == 0):
            st.add(("IG", b))
        st.drop(("G", b))

    def merged_op(f: int, b: int) -> None:
        """Forward f and backward b as one op: the state at its end, the gradient b took still
        referenced."""
        c, cb = take_input(f), vpp - 1 - table[b][1]
        st.acts += kept[c] - kept[cb]
        if not (last and c == vpp - 1):
            st.live.add(("O", f))
        if not (first and cb == 0):
            st.live.add(("IG", b))
        if overlap:  # post_forward, post_backward inside it
            receive(f, first, True)
            receive(b, last, False)
        st.snap()
        st.drop(("G", b))

    if not first:
        st.add(("X", 0))
    for v in range(warm):
        forward(v)
        receive(v, first, True)
        if v == warm - 1 and steady and not last and not overlap:  # one batched exchange
            st.add(("G", 0))
        st.drop(("O", v))
        if v == warm - 1 and steady and not last and overlap:
            st.add(("G", 0))
    for j in range(steady):
        f = warm + j
        st.drop(("O", f - 1))  # pp_pre_forward (freed already without the overlap)
        if merged:
            merged_op(f, j)
        else:
            forward(f)
            if overlap:
                receive(f, first, True)
            backward(j)
        if overlap and not merged:
            receive(j, last, False)
        st.drop(("IG", j - 1))
        if not overlap:  # the batched exchange, the output freed after it
            receive(f, first, True)
            receive(j, last, False)
            st.drop(("O", f))
    st.drop(("O", total - 1))
    if not steady and not last:
        st.add(("G", 0))
    for v in range(steady, total):
        backward(v)
        st.drop(("IG", v - 1))
        if v < total - 1:
            receive(v, last, False)
    return st.peak
