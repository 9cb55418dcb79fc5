"""Where each halo row of the node-level halo travels (the `node-halo` backend), computed from the
plan alone, alike on every rank and in a benchmark without processes.

The ranks form machines of g consecutive ranks (machine of rank r: r // g). Machine n needs U_n:
the distinct rows owned on other machines that any of its ranks reads. Stage 1 brings each row of
U_n over the network once, from its owner to one rank of n, its receiver (U_n in id order, cut into
g runs of about equal size, run i to the machine's i-th rank); rank q keeps what it receives as its
node-halo rows B_q (in id order). Stage 2 stays inside the machine: rank r's halo row h comes from
its provider, h's owner when that shares r's machine, else h's receiver on r's machine; provider p
serves rows of its table [own rows | B_p]. The rows arrive grouped by provider (rank order), each
group in halo order, and are put into halo order, the order the rank's plan reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ..errors import MggError
from ..graph import Graph


@dataclass
class RankRoutes:
    """One rank's share of both stages. Counts are per peer rank (the whole group, zero where
    nothing moves); an index names rows of the sender's table, grouped by destination in rank order."""

    send1_index: np.ndarray  # own rows (offsets into the rank's range) sent to receivers elsewhere
    send1_counts: list
    recv1_counts: list  # node-halo rows received from each owner (B_q, in id order)
    send2_index: np.ndarray  # rows of [own rows | node-halo rows] served to each rank of the machine
    send2_counts: list
    recv2_counts: list
    to_halo: np.ndarray  # halo = received[to_halo]
    num_node_halo: int  # |B_q|


class NodeRoutes:
    """The routes of every rank of a Plan over machines of `gpus_per_node` consecutive ranks. A rank
    whose plan holds its own rows only (a prepared dataset's) learns what its routes need from the
    other ranks: `exchanged`."""

    def __init__(self, plan, gpus_per_node: int, halos: Optional[dict] = None):
        world = plan.num_ranks
        if gpus_per_node < 1 or world % gpus_per_node:
            raise MggError(
                f"node-halo: {world} ranks do not form machines of {gpus_per_node} ranks (LOCAL_WORLD_SIZE); "
                "every machine must have the same number"
            )
        self.plan, self.g, self.world = plan, gpus_per_node, world
        self.bounds = np.asarray(plan.bounds, np.int64)
        self.machines = world // gpus_per_node
        self._node_halo: dict = {}  # machine -> (U_n, receiver rank of each)
        self._halos = halos  # rank -> its halo rows: those a rank of a part plan was told (its machine's)
        self._asked: Optional[dict] = None  # receiver q elsewhere -> the rows of this rank's range q receives

    @classmethod
    def exchanged(cls, plan, gpus_per_node: int, rank: int, exchange) -> "NodeRoutes":
        """Rank `rank`'s routes when its plan holds its own rows only: the halos of its machine's
        ranks, and which of its rows each receiver on another machine receives, from the ranks that
        know them (two exchanges, every rank at once)."""
        g = gpus_per_node
        world = plan.num_ranks
        n = rank // g
        halo = plan.halo_nodes(rank)
        got = exchange([halo if t // g == n else halo[:0] for t in range(world)])
        routes = cls(plan, g, {t: got[t].astype(np.int64) for t in range(n * g, (n + 1) * g)})
        b = routes.received(rank)
        owner = routes.owner(b)
        cuts = np.searchsorted(owner, np.arange(world + 1))
        asked = exchange([b[cuts[r] : cuts[r + 1]] for r in range(world)])
        routes._asked = {q: asked[q].astype(np.int64) for q in range(world) if q // g != n}
        return routes

    def halo_nodes(self, r: int) -> np.ndarray:
        if self._halos is None:
            return self.plan.halo_nodes(r)
        if r not in self._halos:
            raise MggError(f"node-halo: rank {r}'s halo is not known here (another machine's rank of a part plan)")
        return self._halos[r]

    def machine(self, rank: int) -> int:
        return rank // self.g

    def owner(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.bounds, ids, side="right") - 1

    def node_halo(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """U_n (global ids, sorted) and the rank of machine n that receives each."""
        if n not in self._node_halo:
            parts = []
            for r in range(n * self.g, (n + 1) * self.g):
                h = self.halo_nodes(r)
                parts.append(h[self.owner(h) // self.g != n])
            u = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
            receiver = n * self.g + (np.arange(u.size, dtype=np.int64) * self.g) // max(u.size, 1)
            self._node_halo[n] = (u.astype(np.int64), receiver)
        return self._node_halo[n]

    def received(self, q: int) -> np.ndarray:
        """B_q: the node-halo rows rank q receives (global ids, sorted)."""
        u, receiver = self.node_halo(self.machine(q))
        return u[receiver == q]

    def inter_node_rows(self) -> int:
        """Rows that cross the network per exchange: the distinct (row, destination machine) pairs."""
        return sum(self.node_halo(n)[0].size for n in range(self.machines))

    def flat_inter_node_rows(self) -> int:
        """The same for the flat halo over the same ranks: its (row, destination rank) pairs whose
        owner sits on another machine."""
        total = 0
        for r in range(self.world):
            h = self.halo_nodes(r)
            total += int(np.count_nonzero(self.owner(h) // self.g != self.machine(r)))
        return total

    def rank(self, r: int) -> RankRoutes:
        """Rank r's routes."""
        world, g, n = self.world, self.g, self.machine(r)
        lo, hi = int(self.bounds[r]), int(self.bounds[r + 1])
        # stage 1: to every receiver on another machine, the rows of ours it receives, in id order
        send1, send1_counts = [], [0] * world
        for q in range(world):
            if self.machine(q) == n:
                continue
            if self._asked is not None:
                mine = self._asked[q]
            else:
                b = self.received(q)
                mine = b[(b >= lo) & (b < hi)]
            send1.append(mine - lo)
            send1_counts[q] = int(mine.size)
        mine_b = self.received(r)
        recv1_counts = np.bincount(self.owner(mine_b), minlength=world).astype(int).tolist()
        # stage 2: each rank of the machine reads its halo rows from their providers
        send2, send2_counts = [], [0] * world
        for t in range(n * g, (n + 1) * g):
            h = self.halo_nodes(t)
            provider, slot = self._providers(t, h)
            ours = provider == r
            send2.append(slot[ours])
            send2_counts[t] = int(np.count_nonzero(ours))
        h = self.halo_nodes(r)
        provider, _ = self._providers(r, h)
        order = np.argsort(provider, kind="stable")  # received: by provider, each in halo order
        to_halo = np.empty_like(order)
        to_halo[order] = np.arange(order.size)
        recv2_counts = np.bincount(provider, minlength=world).astype(int).tolist()
        cat = lambda parts: np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)  # noqa: E731
        return RankRoutes(
            cat(send1), send1_counts, recv1_counts, cat(send2), send2_counts, recv2_counts, to_halo, int(mine_b.size)
        )

    def _providers(self, t: int, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For rank t's halo rows h: the rank of t's machine that serves each, and its row in that
        rank's table [own rows | node-halo rows]."""
        return self._place(self.machine(t), h)

    def machine_table(self, n: int) -> tuple[list, np.ndarray]:
        """Machine n's rows as its ranks' tables hold them (the `node-nvshmem` backend's symmetric
        tables): each rank's table size (own rows, then node-halo rows), and the global id of every
        row of the tables laid end to end in rank order (each id at most once: a row owned on another
        machine has one receiver on n)."""
        ranks = range(n * self.g, (n + 1) * self.g)
        parts = [p for q in ranks for p in (np.arange(self.bounds[q], self.bounds[q + 1]), self.received(q))]
        sizes = [int(self.bounds[q + 1] - self.bounds[q]) + int(self.received(q).size) for q in ranks]
        return sizes, np.concatenate(parts).astype(np.int64)

    def machine_graph(self, n: int, sources: str = "all"):
        """Machine n's rows over its tables' ids (machine_table: rank q's table is the id range
        [sum of the sizes before q, + its size)): the edges of each rank's own rows, each source
        renamed to its row in the table that serves it (its owner's on n, else its receiver's), and
        no edges into the node-halo rows. In edge order, weights kept; a Plan of it over the tables'
        ranges is the machine's NVSHMEM plan. `sources`: 'all' the edges, 'own' those whose source
        is owned on n, 'received' those whose source came over the network (the two halves of
        node-nvshmem's overlapped step)."""
        ptrs, cols, weights, edges = [np.zeros(1, np.int64)], [], [], 0
        for q in range(n * self.g, (n + 1) * self.g):
            ptr, col, w = self.machine_rows(n, q, sources)
            ptrs.append(ptr[1:] + edges)  # each rank's rows continue where the one before ended
            edges += int(ptr[-1])
            cols.append(col)
            weights.append(w)
        w = None if weights[0] is None else torch.cat(weights)
        return Graph._unchecked(torch.from_numpy(np.concatenate(ptrs)), torch.from_numpy(np.concatenate(cols)), w)

    def machine_rows(self, n: int, q: int, sources: str = "all") -> tuple:
        """Rank q's table rows of machine_graph(n, sources): (rowptr from 0, col (table ids), weight
        or None): its own rows' edges renamed, then no edges for its node-halo rows. Reads only rank
        q's rows of the plan's graph (a rank of a prepared dataset builds its own)."""
        if sources not in ("all", "own", "received"):
            raise MggError(f"sources must be 'all', 'own' or 'received', got {sources!r}")
        sizes, _ = self.machine_table(n)
        start = np.concatenate([[0], np.cumsum(sizes)])
        i = q - n * self.g
        lo, hi = int(self.bounds[q]), int(self.bounds[q + 1])
        rowptr, source, weight = self.plan.graph.row_slice(lo, hi)
        provider, slot = self._place(n, source)
        col = (start[provider - n * self.g] + slot).astype(np.int64)
        degrees = np.concatenate([np.diff(rowptr), np.zeros(sizes[i] - (hi - lo), np.int64)])
        w = None if weight is None else torch.from_numpy(np.ascontiguousarray(weight))
        if sources != "all":
            received = np.zeros(start[-1], bool)  # the machine's table rows that came over the network
            for k, r in enumerate(range(n * self.g, (n + 1) * self.g)):
                received[start[k] + int(self.bounds[r + 1] - self.bounds[r]) : start[k + 1]] = True
            keep = received[col] == (sources == "received")
            rows = np.repeat(np.arange(degrees.size), degrees)[keep]
            col, w = col[keep], None if w is None else w[torch.from_numpy(keep)]
            degrees = np.bincount(rows, minlength=degrees.size)
        ptr = np.zeros(degrees.size + 1, np.int64)
        np.cumsum(degrees, out=ptr[1:])
        return ptr, col, w

    def _place(self, n: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For ids that ranks of machine n read: the rank of n whose table holds each (its owner
        on n, else its receiver on n), and its row in that table [own rows | node-halo rows]."""
        owner = self.owner(ids)
        provider = owner.copy()
        slot = ids - self.bounds[owner]
        away = owner // self.g != n
        if away.any():
            u, receiver = self.node_halo(n)
            at = np.searchsorted(u, ids[away])
            q = receiver[at]
            provider[away] = q
            # the row's place among q's received rows, after q's own rows
            first = np.searchsorted(receiver, q, side="left")
            slot[away] = (self.bounds[q + 1] - self.bounds[q]) + (at - first)
        return provider, slot
