"""mgg's layers under torch.compile, as PyG's examples compile them (examples/compile/gin.py uses
dynamic=True): the host-side planning runs eagerly outside the compiled graph
(torch.compiler.disable), so new graphs of new sizes work, forward and backward equal eager mode."""

import pytest
import torch

import mgg.nn as mnn

LAYERS = {
    "gcn": lambda: mnn.GCNConv(8, 8),
    "gin": lambda: mnn.GINConv(torch.nn.Linear(8, 8)),
    "sage": lambda: mnn.SAGEConv(8, 8),
    "gat": lambda: mnn.GATConv(8, 4, heads=2),
}


@pytest.mark.parametrize("dynamic", [True, False])
@pytest.mark.parametrize("kind", sorted(LAYERS))
def test_compiled_layer_equals_eager_on_graphs_of_new_sizes(kind, dynamic):
    torch._dynamo.reset()
    torch.manual_seed(0)
    conv = LAYERS[kind]()
    compiled = torch.compile(conv, dynamic=dynamic)
    for n in (20, 31, 45):  # a new graph, of a new size, each call
        ei = torch.randint(0, n, (2, 3 * n))
        x = torch.randn(n, 8, requires_grad=True)
        out = compiled(x, ei)
        (gx,) = torch.autograd.grad(out.square().sum(), x)
        ref = conv(x, ei)
        (gref,) = torch.autograd.grad(ref.square().sum(), x)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(gx, gref)
