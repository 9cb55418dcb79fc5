"""ShardedEmbeddingBag and its collection on one process: forward and backward equal to
torch.nn.EmbeddingBag in float64 (assert_same_formula) for every mode and option, with the rows
split across PEs through the mgg ops; the per-batch plan; bad input."""

import pytest
import torch
import torch.nn.functional as F

from mgg.embedding import ShardedEmbeddingBag, ShardedEmbeddingBagCollection
from mgg.embedding.plan import BatchStep, bag_edges, row_bounds
from mgg.errors import MggError
from mgg.testing import CONFIGS, assert_same_formula

N, D = 53, 6


def _batch(seed=0, bags=9, n=N):
    g = torch.Generator().manual_seed(seed)
    # bags of 0 to 8 rows (an empty bag, a row twice in a bag, row 0 and the last row)
    sizes = torch.tensor([3, 0, 5, 1, 8, 2, 0, 4, 6][:bags])
    inp = torch.randint(0, n, (int(sizes.sum()),), generator=g)
    inp[0], inp[1], inp[-1] = n - 1, n - 1, 0
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)[:-1]])
    psw = torch.rand(inp.numel(), generator=g, dtype=torch.float64) + 0.1
    return inp, offsets, psw


def _dense(g):
    return g.to_dense() if g.is_sparse else g


def _pair(mode, pes, sparse=False, padding_idx=None, include_last_offset=False, config=None, seed=0):
    w = torch.randn(N, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    m = ShardedEmbeddingBag(
        N,
        D,
        mode=mode,
        padding_idx=padding_idx,
        include_last_offset=include_last_offset,
        sparse=sparse,
        num_pes=pes,
        config=config,
        dtype=torch.float64,
        _weight=w,
    )
    ref = torch.nn.EmbeddingBag(
        N,
        D,
        mode=mode,
        padding_idx=padding_idx,
        include_last_offset=include_last_offset,
        sparse=sparse and mode != "max",
        _weight=w.clone(),
    )  # torch: no sparse max
    return m, ref


def _check(m, ref, *args):
    out, expect = m(*args), ref(*args)
    assert_same_formula(out, expect.detach(), msg="bags")
    grad = torch.randn(expect.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    out.backward(grad)
    expect.backward(grad)
    assert m.weight.grad.is_sparse == (m.sparse)
    assert_same_formula(_dense(m.weight.grad), _dense(ref.weight.grad), msg="gradient of the table")


@pytest.mark.parametrize("pes", [1, 2, 3])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("sparse", [False, True])
def test_matches_embedding_bag(pes, mode, sparse):
    inp, offsets, _ = _batch()
    _check(*_pair(mode, pes, sparse), inp, offsets)


@pytest.mark.parametrize("pes", [1, 4])
@pytest.mark.parametrize("sparse", [False, True])
def test_per_sample_weights(pes, sparse):
    inp, offsets, psw = _batch(1)
    _check(*_pair("sum", pes, sparse), inp, offsets, psw)


@pytest.mark.parametrize("pes", [1, 2])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [0, -1, 17])
def test_padding_idx(pes, mode, padding_idx):
    inp, offsets, _ = _batch(2)
    inp[3:6] = 17  # a bag with padding entries among others
    inp[offsets[3]] = 17  # a bag of padding only (mean: empty, 0)
    m, ref = _pair(mode, pes, padding_idx=padding_idx)
    _check(m, ref, inp, offsets)


@pytest.mark.parametrize("pes", [1, 3])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_include_last_offset_and_2d_input(pes, mode):
    inp, offsets, _ = _batch(3)
    _check(*_pair(mode, pes, include_last_offset=True), inp, torch.cat([offsets, torch.tensor([inp.numel()])]))
    two_d = torch.randint(0, N, (7, 4), generator=torch.Generator().manual_seed(4))
    _check(*_pair(mode, pes), two_d)
    if mode == "sum":
        _check(*_pair(mode, pes), two_d, None, torch.rand(7, 4, dtype=torch.float64))


@pytest.mark.parametrize("config", CONFIGS)
def test_configs(config):
    inp = torch.randint(0, N, (400,), generator=torch.Generator().manual_seed(6))  # bags of 0..40 rows
    offsets = torch.sort(torch.randint(0, 400, (30,), generator=torch.Generator().manual_seed(7))).values
    offsets[0] = 0
    _check(*_pair("mean", 3, config=config), inp, offsets)


def test_rows_split_across_pes_through_the_op():
    """Each PE's plan reads its own rows in place and its peers' rows by (PE, offset); the
    backward rows are the distinct rows read, each once."""
    inp, offsets, psw = _batch(8)
    e = bag_edges(inp, offsets, psw, N, "sum")
    bounds = row_bounds(N, 3)
    steps = [BatchStep(e, bounds, p, peers=True) for p in range(3)]
    for s in steps:
        assert s.num_local_edges > 0 and s.num_remote_edges > 0
        assert torch.equal(s.rows, torch.unique(inp))
        assert s.halo.unique().numel() == s.halo.numel()  # a row asked for twice is fetched once
        assert bool(((s.halo < s.row_begin) | (s.halo >= s.row_end)).all())
        assert s.local_rows.min() >= 0 and s.local_rows.max() < s.num_rows


@pytest.mark.parametrize("sharding", ["table", "row", "mixed"])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("sparse", [False, True])
def test_collection(sharding, mode, sparse):
    sizes = [30, 7, 50, 12, 9]
    c = ShardedEmbeddingBagCollection(
        sizes, D, mode=mode, sharding=sharding, num_pes=3, sparse=sparse, dtype=torch.float64, row_wise_min_rows=20
    )
    tables = [c.table_weight(t).clone() for t in range(len(sizes))]
    g = torch.Generator().manual_seed(9)
    inputs, offsets, psw = [], [], []
    for n in sizes:
        k = int(torch.randint(5, 30, (1,), generator=g))
        inputs.append(torch.randint(0, n, (k,), generator=g))
        o = torch.sort(torch.randint(0, k, (6,), generator=g)).values
        o[0] = 0
        offsets.append(o)
        psw.append(torch.rand(k, generator=g, dtype=torch.float64))
    weights = psw if mode == "sum" else None
    out = c(inputs, offsets, weights)
    assert out.shape == (6, len(sizes), D)
    grad = torch.randn(out.shape, generator=g, dtype=torch.float64)
    out.backward(grad)
    gw = _dense(c.weight.grad)
    for t in range(len(sizes)):
        w = tables[t].clone().requires_grad_()
        ref = F.embedding_bag(
            inputs[t], w, offsets[t], mode=mode, per_sample_weights=None if weights is None else weights[t]
        )
        ref.backward(grad[:, t])
        assert_same_formula(out[:, t], ref.detach(), msg=f"table {t}")
        assert_same_formula(gw[c.virtual_rows(t, torch.arange(sizes[t]))], w.grad, msg=f"gradient of table {t}")
    split = [len(p) == 3 for p in c.table_pe]  # split across the 3 PEs, or whole on one
    assert all(len(p) in (1, 3) for p in c.table_pe)
    assert split == {"table": [False] * 5, "row": [True] * 5, "mixed": [n >= 20 for n in sizes]}[sharding]


def _fresh(pes=2, **kw):
    return ShardedEmbeddingBag(N, D, num_pes=pes, dtype=torch.float64, **kw)


@pytest.mark.parametrize(
    "case, names",
    [
        (lambda m: m(torch.tensor([0, N]), torch.tensor([0])), "input"),
        (lambda m: m(torch.tensor([0, -1]), torch.tensor([0])), "input"),
        (lambda m: m(torch.tensor([1, 2, 3]), torch.tensor([0, -1])), "offsets"),
        (lambda m: m(torch.tensor([1, 2, 3]), torch.tensor([0, 2, 1])), "offsets"),
        (lambda m: m(torch.tensor([1, 2, 3]), torch.tensor([1, 2])), "offsets"),
        (lambda m: m(torch.tensor([1, 2, 3]), torch.tensor([0, 4])), "offsets"),
        (lambda m: m(torch.tensor([1, 2, 3])), "offsets"),
        (lambda m: m(torch.tensor([[1, 2]]), torch.tensor([0])), "offsets"),
        (
            lambda m: m(torch.tensor([1, 2, 3]), torch.tensor([0]), torch.ones(2, dtype=torch.float64)),
            "per_sample_weights",
        ),
        (lambda m: m(torch.tensor([1.0]), torch.tensor([0])), "input"),
    ],
)
def test_bad_input(case, names):
    m = _fresh(mode="sum")
    before = m.weight.detach().clone()
    with pytest.raises(MggError) as e:
        case(m)
    assert names in str(e.value) and "\n" not in str(e.value)
    assert torch.equal(m.weight, before) and m.weight.grad is None  # nothing half-written


def test_bad_arguments():
    with pytest.raises(MggError, match="num_embeddings .*fewer than the PEs"):
        ShardedEmbeddingBag(3, D, num_pes=4)
    with pytest.raises(MggError, match="per_sample_weights needs mode='sum'"):
        _fresh(mode="mean")(torch.tensor([1, 2]), torch.tensor([0]), torch.ones(2))
    with pytest.raises(MggError, match="include_last_offset"):
        _fresh(include_last_offset=True)(torch.tensor([1, 2, 3]), torch.tensor([0, 2]))
    with pytest.raises(MggError, match="mode"):
        _fresh(mode="median")
    with pytest.raises(MggError, match=r"num_embeddings\[1\]"):
        ShardedEmbeddingBagCollection([10, 2], D, sharding="row", num_pes=3)
    with pytest.raises(MggError, match="fewer than the 3 PEs"):
        ShardedEmbeddingBagCollection([10, 20], D, sharding="table", num_pes=3)
    c = ShardedEmbeddingBagCollection([10, 20], D, num_pes=2)
    with pytest.raises(MggError, match="table 1: input holds index 20"):
        c([torch.tensor([[1]]), torch.tensor([[20]])])
    with pytest.raises(MggError, match="not by the collection"):
        c([torch.tensor([[1]]), torch.tensor([[2]])], None, [torch.ones(1, 1, requires_grad=True), None])
    with pytest.raises(MggError, match="same number of bags"):
        c([torch.tensor([[1]]), torch.tensor([[2], [3]])])


def test_trains_like_embedding_bag():
    """A few SGD steps (sparse gradients) leave the same table as torch.nn.EmbeddingBag's."""
    m, ref = _pair("mean", 3, sparse=True)
    opt, opt_ref = torch.optim.SGD(m.parameters(), lr=0.5), torch.optim.SGD(ref.parameters(), lr=0.5)
    for seed in range(3):
        inp, offsets, _ = _batch(seed)
        for mod, o in ((m, opt), (ref, opt_ref)):
            o.zero_grad()
            (mod(inp, offsets) ** 2).sum().backward()
            o.step()
    assert_same_formula(m.weight.detach(), ref.weight.detach())


@pytest.mark.parametrize("pes", [1, 3])
@pytest.mark.parametrize("padding_idx", [None, 17])
def test_per_sample_weights_gradient(pes, padding_idx):
    """per_sample_weights that require grad get torch.nn.EmbeddingBag's gradient (0 where padding)."""
    inp, offsets, psw = _batch(4)
    inp[2] = 17
    m, ref = _pair("sum", pes, padding_idx=padding_idx)
    grads = []
    for mod in (m, ref):
        p = psw.clone().requires_grad_()
        out = mod(inp, offsets, p)
        out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
        grads.append(p.grad)
    assert_same_formula(grads[0], grads[1], msg="gradient of per_sample_weights")
    assert_same_formula(m.weight.grad, ref.weight.grad, msg="gradient of the table")
    two_d = torch.randint(0, N, (4, 3), generator=torch.Generator().manual_seed(2))
    w2 = [torch.rand(4, 3, dtype=torch.float64).requires_grad_() for _ in range(2)]
    w2[1].data.copy_(w2[0].data)
    m(two_d, None, w2[0]).sum().backward()
    ref(two_d, None, w2[1]).sum().backward()
    assert_same_formula(w2[0].grad, w2[1].grad, msg="2-D input")
