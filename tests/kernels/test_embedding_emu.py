"""Per-batch embedding plans through the CUDA path of the mgg ops, run by the SIMT emulator on
the CPU (simt/emulator.py): the kernels' own source aggregates bags from a table whose rows are
not the output rows (a non-square step), reads peers' rows by (PE, offset) with aggregate_peers,
and runs the compact backward step; fp32 against torch.nn.EmbeddingBag."""

import pytest
import torch

from mgg.embedding import ShardedEmbeddingBag, ShardedEmbeddingBagCollection
from mgg.plan import Config
from simt import emulator

pytestmark = pytest.mark.skipif(emulator.available() is not None, reason=str(emulator.available()))
N, D = 45, 7


def _close(a, b, what):
    torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-5, atol=1e-5, msg=what)


@pytest.mark.parametrize("pes, config", [(1, Config()), (3, Config(2, 2, 2)), (3, Config(0, 1, 1))])
def test_embedding_bag_through_emulated_kernels(pes, config):
    g = torch.Generator().manual_seed(pes)
    w = torch.randn(N, D, generator=g)
    inp = torch.randint(0, N, (60,), generator=g)
    offsets = torch.tensor([0, 4, 4, 20, 21, 33, 50])
    psw = torch.rand(60, generator=g)
    op = "aggregate" if pes == 1 else "aggregate_peers"
    with emulator.emulated_ops(seed=3):
        for mode, weights in (("sum", psw), ("mean", None)):
            m = ShardedEmbeddingBag(N, D, mode=mode, num_pes=pes, config=config, _weight=w)
            ref = torch.nn.EmbeddingBag(N, D, mode=mode, _weight=w.clone())
            before = dict(emulator.CALLS)
            out = m(inp, offsets, weights)
            gr = torch.randn(out.shape, generator=g)
            out.backward(gr)
            r = ref(inp, offsets, weights)
            r.backward(gr)
            assert emulator.CALLS[op] > before[op] and emulator.CALLS["aggregate"] > before["aggregate"]
            _close(out, r, f"{mode}: bags")
            _close(m.weight.grad, ref.weight.grad, f"{mode}: gradient")


def test_collection_through_emulated_kernels():
    sizes = [20, 9, 31]
    with emulator.emulated_ops(seed=4):
        c = ShardedEmbeddingBagCollection(sizes, D, sharding="row", num_pes=3)
        tables = [c.table_weight(t) for t in range(3)]
        inputs = [torch.randint(0, n, (5, 3), generator=torch.Generator().manual_seed(n)) for n in sizes]
        out = c(inputs)
    for t in range(3):
        _close(out[:, t], torch.nn.functional.embedding_bag(inputs[t], tables[t], mode="sum"), f"table {t}")
