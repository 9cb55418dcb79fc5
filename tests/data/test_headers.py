"""Edge lists whose header says what they are: SNAP's '# Undirected graph' (each edge listed
once, both directions meant) and KONECT's out.* files ('% sym|asym|bip WEIGHTS', the size line
'% EDGES LEFT RIGHT', 1-based ids, a timestamp column). Read against the edges the format
means, written out by hand."""

import gzip
import re

import numpy as np
import pytest

from mgg import GraphError
from mgg.data import load_edge_list, load_graph, read_edge_list

from .test_io import edges_of, edges_of_index

SNAP_UNDIRECTED = (
    "# Undirected graph: ../../data/output/toy.ungraph.txt\n# Toy\n# Nodes: 5 Edges: 4\n"
    "# FromNodeId\tToNodeId\n0\t1\n1\t2\n3\t3\n4\t0\n"
)


@pytest.mark.parametrize("gz", [False, True])
def test_snap_undirected_file_gets_both_directions(tmp_path, gz):
    f = tmp_path / ("com-toy.ungraph.txt.gz" if gz else "com-toy.ungraph.txt")
    f.write_bytes(gzip.compress(SNAP_UNDIRECTED.encode()) if gz else SNAP_UNDIRECTED.encode())
    one_way = [[0, 1, 3, 4], [1, 2, 3, 0]]
    both = [[0, 1, 3, 4, 1, 2, 0], [1, 2, 3, 0, 0, 1, 4]]  # the self-loop once
    assert np.array_equal(edges_of(load_graph(str(f))), edges_of_index(both))
    assert np.array_equal(edges_of(load_edge_list(f, undirected=False)), edges_of_index(one_way))


def test_snap_directed_file_stays_directed(tmp_path):
    f = tmp_path / "d.txt"
    f.write_text("# Directed graph (each unordered pair of nodes is saved once): d.txt\n0\t1\n1\t2\n")
    assert np.array_equal(edges_of(load_graph(str(f))), edges_of_index([[0, 1], [1, 2]]))
    assert np.array_equal(edges_of(load_edge_list(f, undirected=True)), edges_of_index([[0, 1, 1, 2], [1, 2, 0, 1]]))


def test_konect_sym_is_undirected_and_one_based(tmp_path):
    f = tmp_path / "out.toy"
    f.write_text("% sym unweighted\n% 3 5 5\n1 2\n2 3\n4 4\n")
    g = load_graph(str(f))
    assert g.num_nodes == 5  # node 5 isolated, as the size line says; no node for id 0
    assert np.array_equal(edges_of(g), edges_of_index([[0, 1, 3, 1, 2], [1, 2, 3, 0, 1]]))


def test_konect_asym_with_weights_and_timestamps(tmp_path):
    f = tmp_path / "out.toy"
    f.write_text("% asym positive\n% 3 4 4\n1 2 5 1234567\n2 3 1 1234568\n4 1 2.5 1234569\n")
    g = load_graph(str(f))
    assert g.num_nodes == 4
    assert np.array_equal(edges_of(g), edges_of_index([[0, 1, 3], [1, 2, 0]], [5, 1, 2.5]))


@pytest.mark.parametrize("size_line", [True, False])
def test_konect_bip_puts_right_ids_after_left(tmp_path, size_line):
    f = tmp_path / "out.toy"
    f.write_text("% bip unweighted\n" + ("% 3 2 3\n" if size_line else "") + "1 1\n1 3\n2 2\n")
    g = load_graph(str(f))
    assert g.num_nodes == 5  # left 0..1, right 2..4
    assert np.array_equal(edges_of(g), edges_of_index([[0, 0, 1, 2, 4, 3], [2, 4, 3, 0, 0, 1]]))


@pytest.mark.parametrize(
    "body, fragment",
    [
        ("% sym unweighted\n1 2\n0 3\n", "out.bad:3: node ids must be positive (1-based)"),
        ("% sym unweighted\n% 2 3 3\n1 2\n2 4\n", "out.bad:4: node id past 3 (ids count from 1) in '2 4'"),
    ],
)
def test_konect_ids_outside_the_declared_range(tmp_path, body, fragment):
    f = tmp_path / "out.bad"
    f.write_text(body)
    with pytest.raises(GraphError, match=re.escape(fragment)):
        load_graph(str(f))


def test_an_undirected_header_does_not_double_listed_reverses(tmp_path):
    f = tmp_path / "both.txt"
    f.write_text("# Undirected graph: both directions listed\n0 1\n1 0\n1 2\n")
    assert np.array_equal(edges_of(load_graph(str(f))), edges_of_index([[0, 1, 1, 2], [1, 0, 2, 1]]))


def test_a_comment_that_only_mentions_the_words_is_no_header(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("# This file is not an Undirected graph\n0 1\n")
    assert np.array_equal(edges_of(load_graph(str(f))), edges_of_index([[0], [1]]))


def test_konect_with_num_nodes_and_relabel(tmp_path):
    f = tmp_path / "out.toy"
    f.write_text("% sym unweighted\n% 2 4 4\n1 2\n2 3\n")
    assert load_edge_list(f, num_nodes=4).num_nodes == 4
    with pytest.raises(GraphError, match=r"num_nodes 3 does not fit the file \(4 nodes\)"):
        load_edge_list(f, num_nodes=3)
    sparse = tmp_path / "out.sparse"
    sparse.write_text("% asym unweighted\n10 20\n20 40\n")
    t = read_edge_list(sparse, relabel=True)
    assert t.ids.tolist() == [10, 20, 40] and t.src.tolist() == [0, 1] and t.dst.tolist() == [1, 2]


def test_konect_bip_ids_are_checked(tmp_path):
    f = tmp_path / "out.bip"
    f.write_text("% bip unweighted\n1 40000000\n")
    with pytest.raises(GraphError, match="sparse ids"):
        load_graph(str(f))
    with pytest.raises(GraphError, match="relabel of a bipartite KONECT file"):
        read_edge_list(f, relabel=True)
