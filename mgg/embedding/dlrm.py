"""Criteo-Kaggle-like synthetic DLRM inputs (for the `dlrm` bench suite and examples/dlrm.py) and
a small DLRM (bottom MLP, sharded embedding bags, dot interaction, top MLP).

The 26 categorical features take the cardinalities of Criteo's Kaggle display-advertising data
set as the DLRM reference implementation counts them; indices follow a power law (a few rows
take most lookups, as hashed categorical ids do) and are scattered over the table by a fixed
bijection, so hot rows are not all at the start (on one PE). Each sample has 13 dense features
and a click label that depends on the dense features and on a hidden score of some of its rows,
so a model can learn it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from ..errors import MggError

# Criteo Kaggle (DLRM's --data-set=kaggle): rows of each of the 26 categorical features
CRITEO_KAGGLE = (
    1460,
    583,
    10131227,
    2202608,
    305,
    24,
    12517,
    633,
    3,
    93145,
    5683,
    8351593,
    3194,
    27,
    14992,
    5461306,
    10,
    5652,
    2173,
    4,
    7046547,
    18,
    15,
    286181,
    105,
    142572,
)
DENSE_FEATURES = 13


def cardinalities(cap: Optional[int] = None, tables: int = 26) -> list[int]:
    """Criteo Kaggle's table sizes (the first `tables`), each at most `cap` rows."""
    if not 1 <= tables <= len(CRITEO_KAGGLE):
        raise MggError(f"tables must be in [1, {len(CRITEO_KAGGLE)}], got {tables}")
    return [n if cap is None else min(n, cap) for n in CRITEO_KAGGLE[:tables]]


def _coprime_stride(n: int) -> int:
    s = int(n * 0.6180339887) | 1
    while math.gcd(s, n) != 1:
        s += 2
    return s


def power_law_rows(n: int, count: int, alpha: float, gen: torch.Generator) -> torch.Tensor:
    """`count` rows of a table of n, rank k drawn with probability about k^-alpha (alpha > 0,
    != 1; alpha = 0: uniform), scattered over the table by a fixed bijection."""
    u = torch.rand(count, generator=gen, dtype=torch.float64)
    if alpha == 0:
        k = (u * n).long()
    else:
        a = 1.0 - alpha
        k = (((n + 1.0) ** a - 1.0) * u + 1.0).pow(1.0 / a).floor().long() - 1
    k = k.clamp_(0, n - 1)
    return (k * _coprime_stride(n)) % n


@dataclass
class Batch:
    dense: torch.Tensor  # [B, 13]
    inputs: list  # per table: int64 [lookups]
    offsets: list  # per table: int64 [B]
    labels: torch.Tensor  # [B] float 0/1

    def slice(self, begin: int, end: int) -> "Batch":
        """Samples [begin, end) (a rank's share of a global batch)."""
        ins, offs = [], []
        for inp, off in zip(self.inputs, self.offsets, strict=True):
            ends = torch.cat([off[1:], off.new_tensor([inp.numel()])])
            lo, hi = int(off[begin]), int(ends[end - 1]) if end > begin else int(off[begin])
            ins.append(inp[lo:hi])
            offs.append(off[begin:end] - lo)
        return Batch(self.dense[begin:end], ins, offs, self.labels[begin:end])


def synthetic_batch(
    sizes: Sequence[int],
    batch: int,
    pooling: int = 1,
    alpha: float = 1.05,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> Batch:
    """One batch of Criteo-like samples.

    Args:
        sizes: rows of each table.
        batch: samples.
        pooling: 1: one lookup per table and sample (Criteo's one-hot features); > 1: multi-hot,
            bags of 1 to 2 * pooling - 1 lookups (mean `pooling`).
        alpha: the power law's exponent.
        seed: the batch (the same seed gives the same batch on every rank).
    """
    gen = torch.Generator().manual_seed(seed)
    dense = torch.randn(batch, DENSE_FEATURES, generator=gen, dtype=dtype)
    inputs, offsets = [], []
    score = dense[:, 0].double() - 0.5 * dense[:, 1].double()
    for t, n in enumerate(sizes):
        counts = (
            torch.ones(batch, dtype=torch.int64)
            if pooling == 1
            else torch.randint(1, 2 * pooling, (batch,), generator=gen)
        )
        rows = power_law_rows(n, int(counts.sum()), alpha, gen)
        offs = torch.zeros(batch, dtype=torch.int64)
        torch.cumsum(counts[:-1], 0, out=offs[1:])
        inputs.append(rows)
        offsets.append(offs)
        if t < 3:  # a hidden score of the first rows of three tables
            hidden = torch.sin(rows[offs].double() * 12.9898 + 78.233 * t)
            score = score + hidden
    labels = (score > 0).to(dtype)
    return Batch(dense, inputs, offsets, labels)


def mlp(sizes: Sequence[int], last_relu: bool = True) -> torch.nn.Sequential:
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(torch.nn.Linear(a, b))
        if last_relu or i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class DLRM(torch.nn.Module):
    """A small DLRM: bottom MLP on the dense features, embedding bags of the sparse ones (any
    module taking (inputs, offsets) and giving [B, tables, D]: mgg's ShardedEmbeddingBagCollection
    or `EmbeddingBags` below), pairwise dot interaction, top MLP to a click logit."""

    def __init__(
        self,
        embeddings: torch.nn.Module,
        num_tables: int,
        dim: int,
        bottom: Sequence[int] = (32,),
        top: Sequence[int] = (64, 32),
    ):
        super().__init__()
        self.embeddings = embeddings
        self.bottom = mlp([DENSE_FEATURES, *bottom, dim])
        f = num_tables + 1
        self.top = mlp([dim + f * (f - 1) // 2, *top, 1], last_relu=False)
        self._tri = torch.triu_indices(f, f, 1)

    def forward(self, dense: torch.Tensor, inputs, offsets) -> torch.Tensor:
        x = self.bottom(dense)
        feats = torch.cat([x.unsqueeze(1), self.embeddings(inputs, offsets)], 1)  # [B, 1 + T, D]
        inter = torch.bmm(feats, feats.transpose(1, 2))[:, self._tri[0], self._tri[1]]
        return self.top(torch.cat([x, inter], 1)).squeeze(1)


class EmbeddingBags(torch.nn.Module):
    """torch.nn.EmbeddingBag per table, with the collection's call: the reference."""

    def __init__(self, sizes: Sequence[int], dim: int, mode: str = "sum", weights: Optional[Sequence] = None):
        super().__init__()
        self.bags = torch.nn.ModuleList(
            torch.nn.EmbeddingBag(n, dim, mode=mode, _weight=None if weights is None else weights[t].clone())
            for t, n in enumerate(sizes)
        )

    def forward(self, inputs, offsets) -> torch.Tensor:
        return torch.stack([b(i, o) for b, i, o in zip(self.bags, inputs, offsets, strict=True)], 1)
