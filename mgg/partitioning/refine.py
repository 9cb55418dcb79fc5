"""A partition refined for its busiest sender (the `+vb` methods: metis+vb, hypergraph+vb), the
objective of Graph-VB (Acer et al. 2016; sparsity-aware-communication.txt: the total and the maximum
send volume), which no Python package optimises: METIS and Mt-KaHyPar lower the total alone, and one
part may send several times the mean (2.65x on Amazon at 256 GPUs, SA's Table 2) while a sparsity-
aware exchange, 1D or 1.5D, waits for its busiest sender.

Volumes, on the column-net hypergraph (a net per node v: v and the nodes that read v; mgg.plan.stats
counts the same): lam(v) = the parts other than v's that read v; part p sends S_p = sum over its nodes
of lam(v) rows and receives R_p = the nodes of other parts it reads; the total is sum_p S_p (km1).

Refinement, in two phases. First the total (lower_total): passes over the nodes that send, each moved
to the part among its neighbours' where the total falls most, where that keeps every part's weight
within the cap and raises no part's sends above the busiest's; METIS lowers the cut edges, not the rows
sent, and on the R-MAT stand-ins this phase takes 6-9% off METIS's total and, since the busiest sender
starts within 10% of the mean, most of the busiest's fall (docs/distributed.md). Then the busiest
(shared/notes/one_point_five_d.md section 3a, widened): greedy moves of a node of the busiest
sender p* into a part that reads it (which removes that part from the node's readers), each evaluated by its
exact effect on every part's S and R (the node's own net, and the net of every node it reads), or into
one of the parts that send least (its sends move there, the busiest's fall); failing those, the one
reader a part has of the node moved to p* or to another reader part (that part then reads it no more);
each taken when it lowers (max S, the parts at max S, total) lexicographically and keeps every part's
weight (in-degree + 1, as mgg's methods balance) within the balance cap; rounds until no move helps or
the work bound is spent (EVALUATIONS_PER_NODE moves weighed per node: the gains come early). Last, the
pairs (paired_moves): where the cap is what stops a busiest sender's node, its move is paired with one
out of its target that makes room, kept when the pair lowers the same objective; then single moves
again, for at most PAIR_ROUNDS rounds."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..errors import MggError
from ..graph import Graph

IMBALANCE_CAP = 0.03  # the weight cap over the mean part weight (methods.IMBALANCE)
LIGHT_PARTS = 8  # besides the parts that read a node, the parts that send least are tried for it
TARGET_PARTS = 8  # the busiest senders whose nodes a pass tries to move
TOTAL_SLACK = 0.08  # the total volume may grow this much over the partition's refined
RETRY_FALL = 0.005  # the nodes skipped are weighed again each time the busiest's sends fall this much
EVALUATIONS_PER_NODE = 2  # the work bound: moves weighed per node (Cora converges within 4)
TOTAL_PASSES = 4  # lower_total's passes at most; it stops at a pass that lowers the total by less than
TOTAL_PASS_GAIN = 0.005  # this fraction
PAIR_SENDERS = 400  # the paired moves: a busiest part's largest senders weighed for a move its target's cap blocks
PAIR_CANDIDATES = 30  # and the target's nodes weighed to make room there
PAIR_ROUNDS = 4  # rounds of paired moves and then single ones again, at most
VERSION = 3  # of the +vb result for the same input (the partition cache's key): 3 adds the paired moves
MIN_EVALUATIONS = 20_000
MAX_TABLE_BYTES = 2**30  # the readers-per-node-and-part table (int32 [nodes, parts]) at most


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
        if n * k * 4 > MAX_TABLE_BYTES:
            raise MggError(
                f"the +vb refinement keeps a table of readers per node and part: {n:,} nodes x {k} parts is "
                f"{n * k * 4 / 2**30:.1f} GiB, over its {MAX_TABLE_BYTES / 2**30:.0f} GiB; use the partition unrefined"
            )
        a = sp.csr_matrix((np.ones(graph.num_edges, np.int8), graph.col.numpy(), graph.rowptr.numpy()), shape=(n, n))
        a.sum_duplicates()
        a.setdiag(0)
        a.eliminate_zeros()
        self.reads = a  # row v: the distinct sources v reads (itself left out)
        readers = a.T.tocsr()  # row u: the nodes that read u
        self.k, self.part = k, np.asarray(part, np.int64).copy()
        self.weights = np.asarray(weights, np.int64)
        self.W = np.bincount(self.part, weights=self.weights, minlength=k).astype(np.int64)
        # phi[u, p]: the readers of u in part p
        owners = np.repeat(np.arange(n), np.diff(readers.indptr))
        self.phi = np.zeros((n, k), np.int32)
        np.add.at(self.phi, (owners, self.part[readers.indices]), 1)
        sent = self.phi > 0
        sent[np.arange(n), self.part] = False
        self.lam = sent.sum(1).astype(np.int64)
        self.S = np.bincount(self.part, weights=self.lam, minlength=k).astype(np.int64)
        self.R = sent.sum(0).astype(np.int64)
        self._readers = readers

    @property
    def total(self) -> int:
        return int(self.S.sum())

    def deltas(self, v: int, targets: np.ndarray) -> np.ndarray:
        """dS [len(targets), k]: how moving v to each part of `targets` changes every part's send
        volume (nothing applied)."""
        a, k = int(self.part[v]), self.k
        targets = np.asarray(targets, np.int64)
        r = self.reads
        u = r.indices[r.indptr[v] : r.indptr[v + 1]]
        pu = self.part[u]
        out = np.zeros((targets.size, k), np.int64)
        lam, in_a = int(self.lam[v]), int(self.phi[v, a] > 0)
        out[:, a] -= lam
        out[np.arange(targets.size), targets] += lam - (self.phi[v, targets] > 0) + in_a
        if u.size:
            # u's net loses part a where v was its one reader there; gains b where it had none
            leaves = np.bincount(pu[(self.phi[u, a] == 1) & (pu != a)], minlength=k)
            gains = (self.phi[u[:, None], targets[None, :]] == 0) & (pu[:, None] != targets[None, :])  # [|u|, T]
            ui, ti = np.nonzero(gains)  # out[t, p] += the nodes u of part p that target t would gain
            out += np.bincount(ti * k + pu[ui], minlength=targets.size * k).reshape(targets.size, k)
            out -= leaves[None, :]
        out[targets == a] = 0
        return out

    def _dR(self, v: int, b: int) -> np.ndarray:
        a, k = int(self.part[v]), self.k
        dR = np.zeros(k, np.int64)
        if a == b:
            return dR
        dR[b] -= int(self.phi[v, b] > 0)
        dR[a] += int(self.phi[v, a] > 0)
        r = self.reads
        u = r.indices[r.indptr[v] : r.indptr[v + 1]]
        pu = self.part[u]
        dR[a] -= int(((self.phi[u, a] == 1) & (pu != a)).sum())
        dR[b] += int(((self.phi[u, b] == 0) & (pu != b)).sum())
        return dR

    def move(self, v: int, b: int) -> None:
        """Moves v to part b, every volume updated."""
        a = int(self.part[v])
        if a == b:
            return
        dS = self.deltas(v, np.array([b]))[0]
        dR = self._dR(v, b)
        in_b, in_a = int(self.phi[v, b] > 0), int(self.phi[v, a] > 0)
        r = self.reads
        u = r.indices[r.indptr[v] : r.indptr[v + 1]]
        pu = self.part[u]
        self.phi[u, a] -= 1
        gone = (self.phi[u, a] == 0) & (pu != a)
        new = (self.phi[u, b] == 0) & (pu != b)
        self.phi[u, b] += 1
        self.lam[u] += new.astype(np.int64) - gone.astype(np.int64)
        self.lam[v] += -in_b + in_a
        self.S += dS
        self.R += dR
        self.W[a] -= self.weights[v]
        self.W[b] += self.weights[v]
        self.part[v] = b

    def readers_parts(self, v: int) -> list:
        """The parts other than v's that read v, most readers first."""
        counts = self.phi[v].copy()
        counts[self.part[v]] = 0
        found = np.flatnonzero(counts)
        return found[np.argsort(-counts[found], kind="stable")].tolist()

    def around(self, x: int) -> np.ndarray:
        """The nodes whose moves a move of x changes: x, its readers, the nodes x reads and their
        readers (deltas reads phi of v and of the nodes v reads)."""
        r, rd = self.reads, self._readers
        u = r.indices[r.indptr[x] : r.indptr[x + 1]]
        near = [np.array([x]), rd.indices[rd.indptr[x] : rd.indptr[x + 1]], u]
        near += [rd.indices[rd.indptr[w] : rd.indptr[w + 1]] for w in u.tolist()]
        return np.concatenate(near)

    def only_reader(self, v: int, q: int):
        """The one node of part q that reads v, or None (none or several)."""
        if self.phi[v, q] != 1:
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


def lowers(S: np.ndarray, ref: np.ndarray, most: float) -> np.ndarray:
    """Which rows of S [candidates, k] (every part's sends after a candidate move) lower the
    objective from the sends `ref` [k] (objective(): the sorted sends, then the total) and keep the
    total within `most`."""
    totals = S.sum(1)
    diff = -np.sort(-S, axis=1) - np.sort(ref)[::-1][None, :]
    nonzero = diff != 0
    first = np.argmax(nonzero, axis=1)
    lower = np.where(nonzero.any(1), diff[np.arange(len(S)), first] < 0, totals < ref.sum())
    return lower & (totals <= most)


def lowest(S: np.ndarray) -> int:
    """The row of S [candidates, k] with the lowest objective (the first of equal ones)."""
    return min(range(len(S)), key=lambda i: objective(S[i]))


def lower_total(vol: Volumes, limit: float, passes: int = TOTAL_PASSES, check=None) -> None:
    """The first phase (module docstring): each node that sends rows, in id order, moved to the part
    among its neighbours' (the nodes it reads and those that read it) where the total falls most,
    where the move keeps that part's weight within `limit` and no part's sends above the busiest's;
    passes until one lowers the total by less than TOTAL_PASS_GAIN."""
    reads, readers = vol.reads, vol._readers
    for _ in range(passes):
        start = vol.total
        for v in np.flatnonzero(vol.lam > 0).tolist():
            a = int(vol.part[v])
            near = np.concatenate(
                [
                    reads.indices[reads.indptr[v] : reads.indptr[v + 1]],
                    readers.indices[readers.indptr[v] : readers.indptr[v + 1]],
                ]
            )
            targets = np.unique(vol.part[near])
            targets = targets[(targets != a) & (vol.W[targets] + vol.weights[v] <= limit)]
            if not targets.size:
                continue
            dS = vol.deltas(v, targets)
            fall = dS.sum(1)
            ok = (fall < 0) & ((vol.S[None, :] + dS).max(1) <= vol.S.max())
            if ok.any():
                best = np.flatnonzero(ok)[np.argmin(fall[ok])]
                vol.move(v, int(targets[best]))
                if check is not None:
                    check(vol)
        if vol.total > (1 - TOTAL_PASS_GAIN) * start:
            return


def refine(
    graph: Graph,
    part: np.ndarray,
    k: int,
    weights: np.ndarray,
    evaluations: int | None = None,
    cap=IMBALANCE_CAP,
    total_slack=TOTAL_SLACK,
    check=None,
):
    """The partition `part` refined for its busiest sender (module docstring).

    Args:
        graph, part, k, weights: as Volumes.
        evaluations: the moves weighed at most by the single moves over every round, and again by
            the paired ones (default: EVALUATIONS_PER_NODE per node, at least MIN_EVALUATIONS): the
            work bound, since late moves gain little (docs/distributed.md).
        cap: the weight a part may reach, over the mean part weight.
        total_slack: how much the total volume may grow, over the partition's.
        check: called with the Volumes after every applied move (tests: the invariants).

    Returns:
        (the refined part of each node, the Volumes).
    """
    vol = Volumes(graph, part, k, weights)
    limit = (1 + cap) * vol.W.sum() / k
    most = (1 + total_slack) * vol.total
    lower_total(vol, limit, check=check)
    if evaluations is None:
        evaluations = max(MIN_EVALUATIONS, EVALUATIONS_PER_NODE * graph.num_nodes)
    singles, pairs = [evaluations], [evaluations]  # each phase's work bound, over every round
    for _ in range(PAIR_ROUNDS):
        single_moves(vol, limit, most, singles, check)
        if not paired_moves(vol, limit, most, pairs, check):
            break
    return vol.part, vol


def single_moves(vol: Volumes, limit: float, most: float, budget: list, check=None) -> int:
    """The second phase (module docstring): moves of the busiest senders' nodes, or of a reader
    part's one reader of such a node, each taken when it lowers the objective, until none does or
    budget[0] moves have been weighed (what is left stays in it); returns the moves."""

    def improves(u: int, targets) -> bool:
        """Moves u to the first of `targets` where that is within the cap and lowers the objective."""
        budget[0] -= 1
        targets = np.array([b for b in targets if b != vol.part[u] and vol.W[b] + vol.weights[u] <= limit], np.int64)
        if not targets.size:
            return False
        ok = np.flatnonzero(lowers(vol.S[None, :] + vol.deltas(u, targets), vol.S, most))
        if not ok.size:
            return False
        vol.move(u, int(targets[ok[0]]))
        if check is not None:
            check(vol)
        return True

    # A node no move helped is skipped until a move near it (stale_around) or a change of the busiest
    # sender, or a fall of its sends by RETRY_FALL of the start, may have opened one.
    stale = np.zeros(vol.part.size, bool)
    total_moved = 0
    start = cleared_at = int(vol.S.max())
    busiest, again = None, True
    while budget[0] > 0:
        order = np.argsort(-vol.S, kind="stable")[:TARGET_PARTS].tolist()  # the busiest senders first
        if order[0] != busiest or vol.S[order[0]] <= cleared_at - RETRY_FALL * start:
            stale[:] = False
            busiest, cleared_at = order[0], int(vol.S[order[0]])
        moved = 0
        for p_star in order:
            members = np.flatnonzero((vol.part == p_star) & (vol.lam > 0) & ~stale)
            members = members[np.argsort(-vol.lam[members], kind="stable")]
            for v in members.tolist():
                if vol.part[v] != p_star or stale[v] or budget[0] <= 0:
                    continue
                light = np.argsort(vol.S, kind="stable")[:LIGHT_PARTS].tolist()  # the parts that send least
                readers = vol.readers_parts(v)
                if improves(v, dict.fromkeys(readers + light)):
                    moved += 1
                    stale[vol.around(v)] = False
                    continue
                for q in readers:  # second order: q's one reader of v moved away, so q reads v no more
                    u = vol.only_reader(v, q)
                    if u is not None and improves(u, dict.fromkeys([p_star, *readers])):
                        moved += 1
                        stale[vol.around(u)] = False
                        break
                else:
                    stale[v] = True
            if moved:
                break  # the busiest senders again, from the top
        total_moved += moved
        if moved:
            again = True
        elif stale.any() and again:  # every node once more: the sends that fell since may open moves
            stale[:] = False
            again = False
        else:
            break
    return total_moved


def paired_moves(vol: Volumes, limit: float, most: float, budget: list, check=None) -> int:
    """The third phase: where the balance cap is what stops a busiest sender's node from moving, the
    move paired with one that makes room, out of its target (one_point_five_d.md's refinement,
    widened). For each of the TARGET_PARTS busiest senders p*, its PAIR_SENDERS largest senders v: a
    move of v to a reader part or a light part whose weight it would take over the cap, and that
    raises no part above the busiest, is applied; then, of that part's PAIR_CANDIDATES nodes heavy
    enough to bring it back under the cap (those p* reads first, the fewest readers first), the move
    to p*, a light part or one of its reader parts that lowers the objective from before the pair
    most, weighed exactly on the moved state, is applied, or v's move undone. `check` sees the
    pairs, not the half of one. Each move weighed counts against budget[0]. Returns the pairs applied."""
    pairs = 0
    for p_star in np.argsort(-vol.S, kind="stable")[:TARGET_PARTS].tolist():
        members = np.flatnonzero((vol.part == p_star) & (vol.lam > 0))
        for v in members[np.argsort(-vol.lam[members], kind="stable")][:PAIR_SENDERS].tolist():
            if budget[0] <= 0:
                return pairs
            if vol.part[v] != p_star:
                continue
            budget[0] -= 1
            light = np.argsort(vol.S, kind="stable")[:LIGHT_PARTS].tolist()
            blocked = [b for b in dict.fromkeys(vol.readers_parts(v) + light) if b != p_star]
            blocked = np.array([b for b in blocked if vol.W[b] + vol.weights[v] > limit], np.int64)
            if not blocked.size:
                continue
            ref = vol.S.copy()
            S = ref[None, :] + vol.deltas(v, blocked)
            fits = np.flatnonzero((S.max(1) <= ref.max()) & (S.sum(1) <= most))
            if not fits.size:
                continue
            b = int(blocked[fits[lowest(S[fits])]])
            vol.move(v, b)
            made = _make_room(vol, b, p_star, ref, limit, most, light, budget)
            if made:
                pairs += 1
                if check is not None:
                    check(vol)
            else:
                vol.move(v, p_star)
    return pairs


def _make_room(vol: Volumes, b: int, p_star: int, ref, limit, most, light, budget: list) -> bool:
    """Moves one node out of part b (over the cap by the pair's first move) where that brings b
    under the cap and the pair lowers the objective from `ref`; whether one moved."""
    need = vol.W[b] - limit
    nodes = np.flatnonzero(vol.part == b)
    nodes = nodes[vol.weights[nodes] >= need]
    if not nodes.size:
        return False
    read = vol.phi[nodes, p_star] > 0
    nodes = nodes[np.lexsort((vol.lam[nodes], ~read))][:PAIR_CANDIDATES]  # read by p* first, fewest readers
    best, best_key = None, None
    for u in nodes.tolist():
        budget[0] -= 1
        targets = [c for c in dict.fromkeys([p_star, *light, *vol.readers_parts(u)]) if c != b]
        targets = np.array([c for c in targets if vol.W[c] + vol.weights[u] <= limit], np.int64)
        if not targets.size:
            continue
        S = vol.S[None, :] + vol.deltas(u, targets)
        ok = np.flatnonzero(lowers(S, ref, most))
        if ok.size:
            i = ok[lowest(S[ok])]
            if best is None or objective(S[i]) <= best_key:  # ties: the later node
                best, best_key = (u, int(targets[i])), objective(S[i])
        if budget[0] <= 0:
            break
    if best is None:
        return False
    vol.move(*best)
    return True
