"""mgg.partition: every method gives a valid relabelling whose plans compute the user's answer,
the statistics match hand counts (halo rows = km1), the disk cache, and bad input.
The multi-process equality tests are in test_distributed.py."""

import json
import sys

import numpy as np
import pytest
import torch

import mgg
import mgg.data.synthetic  # mgg.data.synthetic.from_spec below: not imported by `import mgg`
from mgg import Config, Graph, MggError, Partition, PlanError
from mgg.partitioning import METHODS
from mgg.partitioning.cache import PartitionCache
from mgg.plan.stats import partition_stats
from mgg.testing import random_graph


def _have(name):
    try:
        __import__(name)
        return True
    except ImportError:
        return False


# the external methods are tested where their packages are installed (the `test` extra has them)
AVAILABLE = [
    m for m in METHODS if m not in ("metis", "hypergraph") or _have({"metis": "pymetis", "hypergraph": "mtkahypar"}[m])
]


@pytest.fixture(autouse=True)
def partition_cache(tmp_path, monkeypatch):
    """Every test partitions into its own cache directory."""
    monkeypatch.setenv("MGG_PARTITION_CACHE", str(tmp_path / "partitions"))
    return tmp_path / "partitions"


def _check_valid(res: Partition, g: Graph, p: int):
    n = g.num_nodes
    assert res.num_ranks == p and res.num_nodes == n
    assert np.array_equal(np.sort(res.perm), np.arange(n))
    assert np.array_equal(res.perm[res.inverse], np.arange(n))
    assert res.bounds[0] == 0 and res.bounds[-1] == n and np.all(np.diff(res.bounds) >= 1)
    for r in range(p):
        assert np.all(res.owner[res.rank_nodes(r)] == r)


@pytest.mark.parametrize("method", AVAILABLE)
@pytest.mark.parametrize("p", [2, 3, 4])
def test_every_method_gives_a_relabelling(method, p):
    g = random_graph(200, 2500, seed=5, weighted=True, skew=0.4)
    res = mgg.partition(g, p, method)
    _check_valid(res, g, p)
    assert res.method == method and res.seconds >= 0
    if method == "range":
        assert res.identity and np.array_equal(res.bounds, mgg.split_ranges(g.rowptr, p))
    # row i of the relabelled graph is row perm[i] of the user's, its sources renumbered, in order
    h = res.relabel(g)
    rp, hp = g.rowptr.numpy(), h.rowptr.numpy()
    for i in range(0, g.num_nodes, 7):
        old = res.perm[i]
        assert np.array_equal(h.col.numpy()[hp[i] : hp[i + 1]], res.inverse[g.col.numpy()[rp[old] : rp[old + 1]]])
        assert np.array_equal(h.weight.numpy()[hp[i] : hp[i + 1]], g.weight.numpy()[rp[old] : rp[old + 1]])
    a, b = g.to_scipy().toarray(), h.to_scipy().toarray()
    np.testing.assert_array_equal(b, a[np.ix_(res.perm, res.perm)])


@pytest.mark.parametrize("method", AVAILABLE)
@pytest.mark.parametrize("p", [2, 4])
def test_aggregate_peers_over_a_relabelled_plan(method, p):
    """aggregate_peers with in-process peers over the plan of the relabelled graph: each PE's
    table is its range of the relabelled features; the outputs and the tables' gradients, put
    back in the user's order, are the dense product and its adjoint."""
    g = random_graph(160, 2400, seed=8, weighted=True, skew=0.6)
    x = torch.randn(160, 11, dtype=torch.float64)
    res = mgg.partition(g, p, method)
    plan = res.plan(g)
    xr = x[torch.from_numpy(res.perm)]
    b = res.bounds
    tables = [xr[b[r] : b[r + 1]].clone().requires_grad_() for r in range(p)]
    out = torch.cat(
        [plan.rank_plan(r, Config(3, 2, 2)).aggregate_peers(tables[r], tables, r, "direct") for r in range(p)]
    )
    a = g.to_torch_sparse(torch.float64)
    torch.testing.assert_close(res.to_user(out.detach()), a @ x)
    go = torch.randn(160, 11, dtype=torch.float64)
    out.backward(go[torch.from_numpy(res.perm)])
    grad = res.to_user(torch.cat([t.grad for t in tables]))
    torch.testing.assert_close(grad, a.t() @ go)


def test_relabelling_commutes_with_normalisation():
    """DistGraph relabels a layer's normalised graph; that is the normalisation of the relabelled
    graph (the same weights, permuted)."""
    g = random_graph(90, 700, seed=2)
    res = mgg.partition(g, 3, "random", seed=4)
    a = res.relabel(g.gcn_norm()).to_scipy().toarray()
    b = res.relabel(g).gcn_norm().to_scipy().toarray()
    np.testing.assert_allclose(a, b, rtol=1e-6)
    t = res.relabel(g.transpose()).to_scipy().toarray()
    np.testing.assert_array_equal(t, res.relabel(g).to_scipy().toarray().T)


def _volume_by_hand(g: Graph, owner: np.ndarray) -> int:
    """Sum over nodes v of the ranks other than v's own that read v (km1 of the column nets)."""
    rows = g.rows().numpy()
    readers = {}
    for u, v in zip(rows, g.col.numpy(), strict=True):  # u reads v
        readers.setdefault(int(v), set()).add(int(owner[u]))
    return sum(len(s - {int(owner[v])}) for v, s in readers.items())


def test_statistics_by_hand():
    """A 6-node graph in 2 ranks, counted by hand. Edges u -> v (v reads u):
    0->1 0->2 0->3 1->0 2->4 3->4 4->5 5->4 5->0 5->0 (a duplicate), ranks {0,1,2} and {3,4,5}."""
    src = [0, 0, 0, 1, 2, 3, 4, 5, 5, 5]
    dst = [1, 2, 3, 0, 4, 4, 5, 4, 0, 0]
    g = Graph.from_edges(src, dst, 6)
    ranks, total = partition_stats(g, [0, 3, 6])
    # rank 0 reads rows 0..2: 1<-0, 2<-0, 0<-1 local; 0<-5 twice remote (one halo row: 5)
    # rank 1 reads rows 3..5: 3<-0 remote, 4<-2 remote, 4<-3, 4<-5, 5<-4 local (halo rows: 0, 2)
    assert [(r["local_edges"], r["remote_edges"], r["halo_rows"]) for r in ranks] == [(3, 2, 1), (3, 2, 2)]
    assert [(r["send_rows"], r["max_send_peer"]) for r in ranks] == [(2, 2), (1, 1)]
    assert [r["nodes"] for r in ranks] == [3, 3] and [r["edges"] for r in ranks] == [5, 5]
    assert [r["allgather_rows"] for r in ranks] == [3, 3] and total["allgather_rows"] == 6  # every other rank's rows
    assert (total["remote_edges"], total["halo_rows"], total["max_send_peer"]) == (4, 3, 2)
    assert total["remote_fraction"] == 0.4 and total["edge_imbalance"] == 1.0 and total["node_imbalance"] == 1.0
    assert total["halo_rows"] == _volume_by_hand(g, np.array([0, 0, 0, 1, 1, 1]))
    assert mgg.Plan(g, bounds=[0, 3, 6]).stats() == ranks


@pytest.mark.parametrize("method", AVAILABLE)
def test_halo_rows_are_km1(method):
    """halo rows = the connectivity-minus-one volume, for any partition; where mtkahypar is
    installed, its own km1 of the same partition agrees, and METIS' cut of its input is the
    number of remote edges."""
    g = random_graph(150, 1800, seed=9, skew=0.5)
    res = mgg.partition(g, 4, method)
    ranks, total = res.stats(g)
    assert total["halo_rows"] == _volume_by_hand(g, res.owner) == sum(r["halo_rows"] for r in ranks)
    assert total["halo_rows"] == sum(r["send_rows"] for r in ranks)
    assert total["method"] == method and total["remote_edges"] == sum(r["remote_edges"] for r in ranks)
    from mgg.partitioning import methods as partitioners

    if _have("mtkahypar"):
        import mtkahypar as mk

        mtk = partitioners.mtkahypar()
        ctx = mtk.context_from_preset(mk.PresetType.DETERMINISTIC)
        ctx.set_partitioning_parameters(4, 0.03, mk.Objective.KM1)
        ptr, pins = partitioners.column_nets(g)
        hg = mtk.create_hypergraph(ctx, g.num_nodes, ptr.size - 1, np.split(pins, ptr[1:-1]))
        assert hg.create_partitioned_hypergraph(ctx, 4, res.owner.tolist()).km1() == total["halo_rows"]
    if _have("pymetis") and method == "metis":
        import pymetis

        xadj, adjncy, ew = partitioners.metis_input(g)
        r = pymetis.part_graph(
            4,
            adjacency=pymetis.CSRAdjacency(xadj, adjncy),
            vweights=partitioners.node_weights(g),
            eweights=ew,
            recursive=False,
            options=pymetis.Options(seed=0, ufactor=30),
        )
        assert r.edge_cuts == total["remote_edges"]


@pytest.mark.parametrize("method", [m for m in AVAILABLE if m != "range"])
def test_methods_are_seeded(method):
    g = random_graph(300, 3000, seed=1)
    a = mgg.partition(g, 4, method, seed=3, cache=False)
    b = mgg.partition(g, 4, method, seed=3, cache=False)
    assert np.array_equal(a.perm, b.perm) and np.array_equal(a.bounds, b.bounds)


@pytest.mark.parametrize("method", [m for m in AVAILABLE if m in ("metis", "hypergraph")])
def test_partitioners_cut_communication(method):
    """On a graph with communities, the partitioners cut remote edges and rows far below the
    range split, with the edges balanced."""
    g = mgg.data.synthetic.from_spec("sbm:4000:8:10:0.9")
    _, rng = mgg.partition(g, 4, "range").stats(g)
    _, tot = mgg.partition(g, 4, method).stats(g)
    assert tot["remote_fraction"] < 0.15 < rng["remote_fraction"]
    assert tot["halo_rows"] < rng["halo_rows"] / 2
    assert tot["edge_imbalance"] <= 1.10


@pytest.mark.skipif("metis" not in AVAILABLE, reason="needs pymetis")
def test_metis_volume_objective_reaches_metis():
    """objective="volume" is METIS's own (METIS_OBJTYPE_VOL): on an R-MAT graph a lower total of
    rows sent than the cut's partition, within the same balance; an unknown objective is one line."""
    from mgg.partitioning.methods import metis_parts, node_weights
    from mgg.partitioning.refine import Volumes

    g = mgg.data.synthetic.from_spec("rmat:3000:30000")
    w = node_weights(g)
    cut, vol = (Volumes(g, metis_parts(g, 4, 0, objective=o), 4, w) for o in ("cut", "volume"))
    assert vol.total < cut.total
    assert vol.W.max() <= 1.031 * vol.W.mean()
    with pytest.raises(PlanError, match="objective 'edges' is not one of cut, volume"):
        metis_parts(g, 4, 0, objective="edges")


@pytest.mark.parametrize("method", AVAILABLE)
def test_graphs_without_edges_or_with_isolated_nodes(method):
    empty = Graph.from_edges([], [], 10)
    _check_valid(mgg.partition(empty, 3, method), empty, 3)
    iso = Graph.from_edges([0, 1, 2, 3], [1, 2, 3, 0], 40)  # 36 isolated nodes
    res = mgg.partition(iso, 4, method)
    _check_valid(res, iso, 4)
    assert res.stats(iso)[1]["edges"] == 4
    tiny = Graph.from_edges([0, 1], [1, 2], 3)  # METIS puts all 3 nodes in one part: repaired
    _check_valid(mgg.partition(tiny, 3, method), tiny, 3)


def test_one_rank_is_the_identity_whatever_the_method(monkeypatch):
    g = random_graph(30, 100)
    monkeypatch.setitem(sys.modules, "pymetis", None)  # not even the package is needed
    for method in METHODS:
        res = mgg.partition(g, 1, method)
        assert res.identity and res.bounds.tolist() == [0, 30] and res.method == method


@pytest.mark.parametrize(
    "kwargs, err, msg",
    [
        (dict(num_ranks=11), PlanError, r"ranks \(11\) exceed the number of nodes \(10\)"),
        (dict(num_ranks=0), PlanError, "ranks must be a positive integer"),
        (dict(num_ranks=2, method="spectral"), PlanError, "partition method must be one of"),
        (dict(num_ranks=2, seed=-1), PlanError, r"seed must be an integer in \[0, 2\^31\)"),
    ],
)
def test_bad_input(kwargs, err, msg):
    with pytest.raises(err, match=msg):
        mgg.partition(random_graph(10, 30), **kwargs)


@pytest.mark.parametrize("method, package", [("metis", "pymetis"), ("hypergraph", "mtkahypar")])
def test_missing_package_names_the_extra(monkeypatch, method, package):
    monkeypatch.setitem(sys.modules, package, None)  # import fails
    with pytest.raises(MggError, match=rf"'{method}' needs the {package} package: pip install mgg\[partition\]$"):
        mgg.partition(random_graph(10, 30), 2, method, cache=False)


@pytest.mark.skipif("metis" not in AVAILABLE, reason="needs pymetis")
def test_cache_hit_corrupt_and_stale(partition_cache):
    g = random_graph(120, 900, seed=3)
    first = mgg.partition(g, 3, "metis")
    assert not first.cached
    (path,) = partition_cache.glob("*.npz")
    assert path.name == f"{g.fingerprint()}-p3-metis-s0.npz"
    hit = mgg.partition(g, 3, "metis")
    assert hit.cached and np.array_equal(hit.perm, first.perm) and np.array_equal(hit.bounds, first.bounds)
    assert hit.seconds == pytest.approx(first.seconds)
    assert not mgg.partition(g, 3, "metis", seed=1).cached  # another key
    assert not mgg.partition(g, 3, "metis", cache=False).cached
    path.write_bytes(b"not a zip file")
    with pytest.warns(RuntimeWarning, match="ignoring partition cache file .*p3-metis-s0.npz"):
        again = mgg.partition(g, 3, "metis")
    assert not again.cached and np.array_equal(again.perm, first.perm)
    assert mgg.partition(g, 3, "metis").cached  # rewritten
    # stale: a file under this key whose contents are of another graph
    other = random_graph(120, 900, seed=4)
    PartitionCache().put(other, mgg.partition(other, 3, "metis", cache=False))
    (partition_cache / f"{other.fingerprint()}-p3-metis-s0.npz").replace(path)
    with pytest.warns(RuntimeWarning, match="stale"):
        assert not mgg.partition(g, 3, "metis").cached
    # a broken permutation
    with np.load(path) as z:
        meta = str(z["meta"])
    np.savez(path, perm=np.zeros(120, np.int32), bounds=np.array([0, 40, 80, 120]), meta=np.array(meta))
    with pytest.warns(RuntimeWarning, match="not a permutation"):
        assert not mgg.partition(g, 3, "metis").cached


def test_cache_directory_argument(tmp_path):
    if "metis" not in AVAILABLE:
        pytest.skip("needs pymetis")
    g = random_graph(50, 300)
    mgg.partition(g, 2, "metis", cache=str(tmp_path / "here"))
    assert len(list((tmp_path / "here").glob("*.npz"))) == 1


def test_partition_is_json_friendly_in_stats():
    g = random_graph(40, 200)
    ranks, total = mgg.partition(g, 2, "random").stats(g)
    json.dumps(dict(ranks=ranks, total=total))  # plain ints and floats
