"""A partition refined for its busiest sender (the `+vb` methods: metis+vb, hypergraph+vb), the
objective of Graph-VB (Acer et al. 2016; sparsity-aware-communication.txt: the total and the maximum
send volume), which no Python package optimises: METIS and Mt-KaHyPar lower the total alone, and one
part may send several times the mean (2.65x on Amazon at 256 GPUs, SA's Table 2) while a sparsity-
aware exchange, 1D or 1.5D, waits for its busiest sender.

Volumes, on the column-net hypergraph (a net per node v: v and the nodes that read v; mgg.plan.stats
counts the same): lam(v) = the parts other than v's that read v; part p sends S_p = sum over its nodes
of lam(v) rows and receives R_p = the nodes of other parts it reads; the total is sum_p S_p (km1).

Refinement (shared/notes/one_point_five_d.md section 3a, widened): greedy moves of a node of the busiest
sender p* into a part that reads it (which removes that part from the node's readers), each evaluated by its
exact effect on every part's S and R (the node's own net, and the net of every node it reads), or into
one of the parts that send least (its sends move there, the busiest's fall); failing those, the one
reader a part has of the node moved to p* or to another reader part (that part then reads it no more);
each taken
when it lowers (max S, the parts at max S, total) lexicographically and keeps every part's weight
(in-degree + 1, as mgg's methods balance) within the balance cap; rounds until no move helps."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..graph import Graph

IMBALANCE_CAP = 0.03  # the weight cap over the mean part weight (methods.IMBALANCE)
LIGHT_PARTS = 8  # besides the parts that read a node, the parts that send least are tried for it
TARGET_PARTS = 8  # the busiest senders whose nodes a pass tries to move
TOTAL_SLACK = 0.08  # the total volume may grow this much over the partition's refined


class Volumes:
    """The send and receive volumes of a k-way partition, kept exact under moves (module docstring).

    Args:
        graph: the graph (row v gathers the sources v reads).
        part: int [nodes], each node's part in [0, k).
        k: the parts.
        weights: each node's weight (in-degree + 1).
    """

    def __init__(self, graph: Graph, part: np.ndarray, k: int, weights: np.ndarray):
        n = graph.num_nodes
        a = sp.csr_matrix((np.ones(graph.num_edges, np.int8), graph.col.numpy(), graph.rowptr.numpy()), shape=(n, n))
        a.sum_duplicates()
        a.setdiag(0)
        a.eliminate_zeros()
        self.reads = a  # row v: the distinct sources v reads (itself left out)
        readers = a.T.tocsr()  # row u: the nodes that read u
        self.k, self.part = k, np.asarray(part, np.int64).copy()
        self.weights = np.asarray(weights, np.int64)
        self.W = np.bincount(self.part, weights=self.weights, minlength=k).astype(np.int64)
        # phi[(u, p)]: the readers of u in part p
        rp = readers.indptr
        owners = np.repeat(np.arange(n), np.diff(rp))
        keys, counts = np.unique(owners * k + self.part[readers.indices], return_counts=True)
        self.phi: dict = dict(zip(keys.tolist(), counts.tolist(), strict=True))
        u, p = keys // k, keys % k
        sent = p != self.part[u]
        self.lam = np.bincount(u[sent], minlength=n).astype(np.int64)
        self.S = np.bincount(self.part, weights=self.lam, minlength=k).astype(np.int64)
        self.R = np.bincount(p[sent], minlength=k).astype(np.int64)
        self._readers = readers

    @property
    def total(self) -> int:
        return int(self.S.sum())

    def _phi(self, u: int, p: int) -> int:
        return self.phi.get(u * self.k + p, 0)

    def delta(self, v: int, b: int) -> tuple:
        """The change moving v to part b makes: ({part: dS}, {part: dR}) (nothing applied)."""
        a, k = int(self.part[v]), self.k
        dS: dict = {}
        dR: dict = {}
        add = lambda d, p, x: d.__setitem__(p, d.get(p, 0) + x)  # noqa: E731
        in_b, in_a = self._phi(v, b) > 0, self._phi(v, a) > 0
        add(dS, a, -int(self.lam[v]))
        add(dS, b, int(self.lam[v]) - in_b + in_a)
        add(dR, b, -int(in_b))
        add(dR, a, int(in_a))
        r = self.reads
        for u in r.indices[r.indptr[v] : r.indptr[v + 1]].tolist():
            pu = int(self.part[u])
            if self.phi.get(u * k + a, 0) == 1 and a != pu:
                add(dS, pu, -1)
                add(dR, a, -1)
            if self.phi.get(u * k + b, 0) == 0 and b != pu:
                add(dS, pu, 1)
                add(dR, b, 1)
        return dS, dR

    def move(self, v: int, b: int) -> None:
        """Moves v to part b, every volume updated."""
        a, k = int(self.part[v]), self.k
        dS, dR = self.delta(v, b)
        in_b, in_a = self._phi(v, b) > 0, self._phi(v, a) > 0
        r = self.reads
        for u in r.indices[r.indptr[v] : r.indptr[v + 1]].tolist():
            pu = int(self.part[u])
            ka, kb = u * k + a, u * k + b
            left = self.phi[ka] - 1
            if left:
                self.phi[ka] = left
            else:
                del self.phi[ka]
                if a != pu:
                    self.lam[u] -= 1
            was = self.phi.get(kb, 0)
            self.phi[kb] = was + 1
            if was == 0 and b != pu:
                self.lam[u] += 1
        self.lam[v] += -int(in_b) + int(in_a)
        for p, d in dS.items():
            self.S[p] += d
        for p, d in dR.items():
            self.R[p] += d
        self.W[a] -= self.weights[v]
        self.W[b] += self.weights[v]
        self.part[v] = b

    def readers_parts(self, v: int) -> list:
        """The parts other than v's that read v, most readers first."""
        rp = self._readers.indptr
        parts = self.part[self._readers.indices[rp[v] : rp[v + 1]]]
        own = self.part[v]
        found, counts = np.unique(parts[parts != own], return_counts=True)
        return found[np.argsort(-counts, kind="stable")].tolist()

    def only_reader(self, v: int, q: int):
        """The one node of part q that reads v, or None (none or several)."""
        if self._phi(v, q) != 1:
            return None
        rp = self._readers.indptr
        readers = self._readers.indices[rp[v] : rp[v + 1]]
        return int(readers[self.part[readers] == q][0])

    def from_scratch(self) -> tuple:
        """(S, R, total) counted anew from the partition (what every move must leave them equal to)."""
        fresh = Volumes.__new__(Volumes)
        Volumes.__init__(fresh, _graph_of(self), self.part, self.k, self.weights)
        return fresh.S, fresh.R, fresh.total


def _graph_of(v: Volumes) -> Graph:
    r = v.reads
    return Graph._unchecked(torch.from_numpy(r.indptr.astype(np.int64)), torch.from_numpy(r.indices.astype(np.int64)))


def objective(S: np.ndarray) -> tuple:
    """What the refinement lowers: the parts' send volumes from the busiest down (lexicographically:
    first the busiest sender's, then the next one's, ...), then the total."""
    return (*np.sort(S)[::-1].tolist(), int(S.sum()))


def refine(
    graph: Graph,
    part: np.ndarray,
    k: int,
    weights: np.ndarray,
    passes: int = 100_000,
    cap=IMBALANCE_CAP,
    total_slack=TOTAL_SLACK,
    check=None,
):
    """The partition `part` refined for its busiest sender (module docstring).

    Args:
        graph, part, k, weights: as Volumes.
        passes: passes over the busiest sender's nodes at most (a pass ends where another part becomes it).
        cap: the weight a part may reach, over the mean part weight.
        total_slack: how much the total volume may grow, over the partition's.
        check: called with the Volumes after every applied move (tests: the invariants).

    Returns:
        (the refined part of each node, the Volumes).
    """
    vol = Volumes(graph, part, k, weights)
    limit = (1 + cap) * vol.W.sum() / k
    most = (1 + total_slack) * vol.total

    def improves(u: int, b: int) -> bool:
        """Moves u to b where that is within the cap and lowers the objective."""
        if b == vol.part[u] or vol.W[b] + vol.weights[u] > limit:
            return False
        dS, _ = vol.delta(u, b)
        S = vol.S.copy()
        for p, d in dS.items():
            S[p] += d
        if S.sum() > most or objective(S) >= objective(vol.S):
            return False
        vol.move(u, b)
        if check is not None:
            check(vol)
        return True

    for _ in range(passes):
        moved = 0
        for p_star in np.argsort(-vol.S, kind="stable")[:TARGET_PARTS].tolist():  # the busiest senders first
            members = np.flatnonzero((vol.part == p_star) & (vol.lam > 0))
            members = members[np.argsort(-vol.lam[members], kind="stable")]
            for v in members.tolist():
                if vol.part[v] != p_star:
                    continue
                light = np.argsort(vol.S, kind="stable")[:LIGHT_PARTS].tolist()  # the parts that send least
                readers = vol.readers_parts(v)
                if any(improves(v, b) for b in dict.fromkeys(readers + light)):
                    moved += 1
                    continue
                for q in readers:  # second order: q's one reader of v moved away, so q reads v no more
                    u = vol.only_reader(v, q)
                    if u is not None and any(improves(u, b) for b in [p_star, *readers]):
                        moved += 1
                        break
            if moved:
                break  # the busiest senders again, from the top
        if not moved:
            break
    return vol.part, vol
