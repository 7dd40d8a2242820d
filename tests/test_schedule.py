"""The schedule pass: what fuses, where the cuts fall, and that a plan is a cache key."""

import numpy as np
import pytest

from ir.graph import dtypes
from ir.graph.node import Node
from ir.graph.ops import Op
from ir.kernel import schedule as schedule_module
from ir.kernel.schedule import READ_BUDGET, schedule
from ir.loop.interp import run, run_graph
from limn import Tensor


def kinds(*outs, **kw) -> list[str]:
    return [k.kind for k in schedule([t.node for t in outs], **kw).graph.kernels]


def test_matmul_is_one_kernel():
    assert kinds(Tensor.randn((4, 5)) @ Tensor.randn((5, 3))) == ["SUM"]


def test_matmul_relu_is_the_reduce_then_an_elementwise_kernel():
    assert kinds((Tensor.randn((4, 5)) @ Tensor.randn((5, 3))).relu()) == ["SUM", "MAP"]


def test_softmax_is_max_then_sum_then_normalize():
    assert kinds(Tensor.randn((4, 5)).softmax(1)) == ["MAX", "SUM", "MAP"]


def test_elementwise_chain_with_broadcast_is_one_kernel():
    x, b = Tensor.randn((3, 4)), Tensor.randn((4,))
    assert kinds(((x * 2 + b).exp() - 1).sqrt()) == ["MAP"]


def test_sgd_step_is_one_kernel_and_an_assign_sink():
    w, g = Tensor.randn((3, 4)).realize(), Tensor.randn((3, 4))
    old = w.node  # a write is a new version; the planner writes it into w's buffer
    sched = schedule([Node(Op.ASSIGN, old.dtype, old.shape, (old, (w - g * 0.1).node))])
    assert [k.kind for k in sched.graph.kernels] == ["MAP"]
    (sink,) = sched.graph.sinks
    assert sink.source == sched.graph.kernels[0].output
    assert sched.inputs[sink.buffer] is old  # into w's own buffer


def test_momentum_step_recomputes_the_shared_update_instead_of_storing_it():
    w, g, m = Tensor.randn((3, 4)), Tensor.randn((3, 4)), Tensor.zeros((3, 4)).realize()
    m2 = m * 0.9 + g
    w.realize()
    graph = schedule(
        [
            Node(Op.ASSIGN, t.dtype, t.shape, (t.node, v.node))
            for t, v in ((w, w - m2 * 0.1), (m, m2))
        ]
    ).graph
    assert [k.kind for k in graph.kernels] == ["MAP", "MAP"]
    assert len(graph.buffers) == graph.n_inputs + 2  # no buffer for m2 itself


def test_value_with_several_users_is_recomputed_in_each_kernel():
    x = Tensor.randn((4, 3))
    e = (x * 0.5).exp()
    graph = schedule([e.sum(0).node, (e * 2).node]).graph
    assert [k.kind for k in graph.kernels] == ["SUM", "MAP"]
    assert all(any(r.op == Op.EXP for r in k.rows) for k in graph.kernels)


def _stream(n: int) -> Tensor:
    """A residual stream n buffers deep: each layer adds one more buffer to read."""
    h = Tensor(np.ones((4, 3), np.float32))
    for i in range(n - 1):
        h = h + Tensor(np.full((4, 3), float(i), np.float32))
    return h


def test_a_shared_value_that_reads_many_buffers_is_stored_once():
    h = _stream(READ_BUDGET)
    graph = schedule([h.sum(1).node, (h * h).sum(1).node]).graph
    assert [k.kind for k in graph.kernels] == ["MAP", "SUM", "SUM"]
    assert [len(k.inputs) for k in graph.kernels] == [READ_BUDGET, 1, 1]
    h = _stream(READ_BUDGET - 1)  # one buffer fewer: recomputed in each consumer
    assert kinds(h.sum(1), (h * h).sum(1)) == ["SUM", "SUM"]
    h = _stream(READ_BUDGET)  # one consumer: fused into it, however many it reads
    assert kinds((h * h).sum(1)) == ["SUM"]


def test_a_deep_stream_is_stored_every_few_layers_not_reread_in_full():
    h = Tensor(np.ones((4, 3), np.float32))
    for i in range(4 * READ_BUDGET):  # each layer reads the stream, and adds a buffer to it
        h = h + Tensor(np.full((4, 3), float(i), np.float32)) * h.mean(1, keepdim=True)
    g = schedule([h.sum(1).node]).graph
    full = [sum(g.buffers[b].shape == (4, 3) for b in k.inputs) for k in g.kernels]
    assert max(full) <= READ_BUDGET  # recomputed in full, the last would read 4 * READ_BUDGET + 1


def _cell_steps(n: int, gates):
    """An LSTM cell's recurrence over ``n`` steps, elementwise: the state ``c`` feeds the
    step's output ``h`` (a root, as the next matmul would store it) and the next step."""
    c, hs = Tensor(np.zeros((4, 3), np.float32)), []
    for t in range(n):
        i, f, g, o = (gates[t, k] for k in range(4))
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        hs.append(o.sigmoid() * c.tanh())
    return hs


def fused_graph(outs):
    return schedule([t.node for t in outs]).graph


def test_a_costly_value_that_several_maps_fuse_is_stored_once_not_recomputed_in_each(
    monkeypatch,
):
    """The cell state is read by its step's output and by the next step: fused into both,
    each step would recompute the steps before it (an LSTM's maps did 200 operations an
    element). Stored once, every kernel stays the size of one step, and every number is
    what the fused nests computed (each node is rounded to its dtype either way)."""
    rng = np.random.default_rng(0)
    gates = Tensor(rng.standard_normal((12, 4, 4, 3)).astype(np.float32))
    hs = _cell_steps(12, gates)
    graph = schedule([h.node for h in hs]).graph
    exps = [sum(r.op == Op.EXP for r in k.rows) for k in graph.kernels]
    assert max(exps) <= 3, exps  # one step's sigmoids, never the steps before
    stored = run([h.node for h in hs])
    monkeypatch.setattr(schedule_module, "SHARED", 1 << 30)  # never stored: all fused
    fused = run([h.node for h in hs])
    assert max(sum(r.op == Op.EXP for r in k.rows) for k in fused_graph(hs).kernels) > 3
    for got, want in zip(stored, fused):
        np.testing.assert_array_equal(got, want)


def test_a_value_a_reduce_fuses_is_never_stored_for_sharing():
    """A reduce's body decides how its total is folded, so a value a reduce fuses stays
    fused (and every sum's bits stay as they are) however many kernels share it."""
    x = Tensor.randn((4, 70))
    e = (x.sigmoid() * x.tanh()).sigmoid() * x.exp()  # costly, shared by a sum and a map
    assert kinds(e.sum(1), e * 2) == ["SUM", "MAP"]


def test_a_gather_read_through_a_broadcast_is_stored_so_its_contraction_is_tiled():
    """An embedding feeding a matmul: the rows it gathers are stored once, and the matmul
    over them is the tiled one, with the bits it has when the program read the rows
    first (laziness changes no number)."""
    from limn.runtime.device import get_device

    rng = np.random.default_rng(0)
    E, W = (rng.standard_normal(s).astype(np.float32) for s in ((50, 64), (40, 64)))
    idx = Tensor(rng.integers(0, 50, (6, 7)))
    emb = Tensor(E)[idx]
    *_, mm = schedule([(emb @ Tensor(W).T).node]).graph.kernels  # (the rows, then the matmul)
    assert mm.kind == "SUM" and not any(r.op == Op.GATHER for r in mm.rows)
    c = get_device("c")
    lazy = c.realize([(Tensor(E, device="c")[idx.to("c")] @ Tensor(W, device="c").T).node])
    rows = Tensor(E, device="c")[idx.to("c")]
    rows.numpy()
    read = c.realize([(rows @ Tensor(W, device="c").T).node])
    assert lazy[0].data.tobytes() == read[0].data.tobytes()


def test_reduce_read_through_a_broadcast_view_is_a_cut():
    x = Tensor.randn((4, 5))
    graph = schedule([(x - x.amax(1, keepdim=True)).node]).graph
    assert [k.kind for k in graph.kernels] == ["MAX", "MAP"]
    assert graph.kernels[1].inputs == (0, graph.kernels[0].output)


def test_dropping_a_kept_dim_aliases_the_reduce_buffer():
    graph = schedule([(Tensor.randn((4, 5)) @ Tensor.randn((5, 3))).node]).graph
    (k,) = graph.kernels
    (sink,) = graph.sinks
    assert sink.buffer == k.output and sink.source is None
    assert graph.buffers[k.output].shape == (4, 3, 1) and sink.shape == (4, 3)


def test_sink_aliasing_the_buffer_moves_no_data():
    x = Tensor.randn((4, 5))
    sched = schedule([x.sum(1).node])
    out = run_graph(sched.graph, [x.numpy()])[0]
    assert out.shape == (4,) and out.base is not None  # a view of the kernel's buffer


def test_permute_over_a_fused_value_stays_fused():
    assert kinds((Tensor.randn((3, 4)) * 2).T.exp()) == ["MAP"]


def test_pad_over_a_fused_value_stays_fused():
    assert kinds(Tensor.randn((3, 4)).exp().pad(((1, 1), (2, 0)))) == ["MAP"]


def test_reshape_merging_fused_dims_stores_the_value_first():
    x = Tensor.randn((3, 4))
    graph = schedule([(x * 2).reshape(12)[1:10].node]).graph
    assert [k.kind for k in graph.kernels] == ["MAP", "MAP"]
    assert graph.buffers[graph.kernels[0].output].shape == (3, 4)


def test_contiguous_is_a_cut():
    x = Tensor.randn((3, 4))
    assert kinds(x.T.contiguous() + 1) == ["MAP", "MAP"]


def test_gather_fuses_into_its_consumer():
    x = Tensor.randn((4, 5))
    idx = Tensor(np.array([[0, 4], [1, 1], [2, 3], [4, 0]]))
    assert kinds((x.exp().gather(1, idx) * 2).sum()) == ["SUM"]


def test_scatter_is_its_own_kernel():
    base, src = Tensor.randn((5, 3)), Tensor.randn((2, 3))
    idx = Tensor(np.array([[0, 1, 0], [4, 4, 2]]))
    assert kinds(base.scatter_add(0, idx, src) * 2) == ["SCATTER", "MAP"]


def test_same_structure_gives_equal_hashable_plans_with_different_inputs():
    def build():
        x, w = Tensor.randn((4, 5)), Tensor.randn((5, 3))
        return [((x @ w).relu() + 0.5).node]

    a, b = schedule(build()), schedule(build())
    assert a.graph == b.graph and hash(a.graph) == hash(b.graph)
    assert a.inputs[0] is not b.inputs[0]
    assert {a.graph: "compiled"}[b.graph] == "compiled"


def test_constants_that_python_confuses_give_distinct_or_equal_plans_correctly():
    x = Tensor.randn((3,))

    def plan(c):
        return schedule([(x * c).node]).graph

    assert plan(0.0) != plan(-0.0)
    assert plan(float("nan")) == plan(float("nan"))
    assert hash(plan(float("nan"))) == hash(plan(float("nan")))


def test_different_structure_gives_different_plans():
    x = Tensor.randn((3, 4))
    assert schedule([(x + 1).node]).graph != schedule([(x * 1).node]).graph
    assert schedule([x.sum(0).node]).graph != schedule([x.sum(1).node]).graph


def test_realized_nodes_become_inputs_and_hide_their_graph():
    x = Tensor.randn((3, 4))
    y = (x * 2).exp()
    z = y + 1
    sched = schedule([z.node], is_realized=lambda n: n is y.node)
    assert sched.inputs == (y.node,)
    assert [k.kind for k in sched.graph.kernels] == ["MAP"]
    got = run_graph(sched.graph, [np.full((3, 4), 5.0, np.float32)])[0]
    np.testing.assert_array_equal(got, np.full((3, 4), 6.0, np.float32))


def test_a_root_that_is_already_a_buffer_needs_no_kernel():
    x = Tensor.randn((3, 4))
    sched = schedule([x.node, x.reshape(12).node])
    assert sched.graph.kernels == ()
    assert [s.shape for s in sched.graph.sinks] == [(3, 4), (12,)]


def test_assign_into_a_lazy_target_is_refused_with_the_reason():
    x = Tensor.randn((3,))
    lazy = x * 2
    node = Node(Op.ASSIGN, lazy.dtype, lazy.shape, (lazy.node, x.node))
    with pytest.raises(ValueError, match="assign: the target must be a realized buffer"):
        schedule([node])


def test_custom_node_is_its_own_kernel_fed_by_stored_inputs():
    a = Tensor.randn((2, 3))
    src = (a * 2).node
    outs = [Node(Op.CUSTOM, dtypes.float32, (2, 3), (src,), ("twice", i, ())) for i in range(2)]
    graph = schedule(outs).graph
    assert [k.kind for k in graph.kernels] == ["MAP", "CUSTOM", "CUSTOM"]
    calls = []

    def twice(vals, params):
        calls.append(params)
        return [vals[0] * 2, vals[0] * 3]

    got = run(outs, kernels={"twice": twice})
    np.testing.assert_allclose(got[0], a.numpy() * 4, rtol=1e-6)
    np.testing.assert_allclose(got[1], a.numpy() * 6, rtol=1e-6)
    assert len(calls) == 1  # siblings share one call


def test_a_reshaped_root_aliases_another_roots_buffer():
    y = Tensor.randn((3, 4)) * 2
    graph = schedule([y.reshape(12).node, y.node]).graph
    assert [k.kind for k in graph.kernels] == ["MAP"]
    assert graph.sinks[0].buffer == graph.sinks[1].buffer


def test_many_stacked_small_pieces_are_stored_every_max_reads_pieces():
    from ir.kernel.schedule import MAX_READS
    from limn import stack

    few = [Tensor.randn((3,)) for _ in range(MAX_READS - 2)]
    many = [Tensor.randn((3,)) for _ in range(5 * MAX_READS)]
    assert kinds(stack(few).sum()) == ["SUM"]
    sched = schedule([stack(many).sum().node])
    g = sched.graph
    maps = len(g.kernels) - 1
    assert [k.kind for k in g.kernels] == ["MAP"] * maps + ["SUM"]
    assert 5 <= maps <= 5 * MAX_READS // (MAX_READS - 1) + 1
    assert len(g.kernels[-1].inputs) < MAX_READS
    assert all(len(k.inputs) <= MAX_READS for k in g.kernels)  # a chain, not one wide kernel
    ref = np.stack([t.numpy() for t in many]).sum()
    assert np.allclose(run_graph(g, [n.arg.data for n in sched.inputs])[0], ref)
