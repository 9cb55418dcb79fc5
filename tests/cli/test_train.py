"""The published GCN accuracy on Cora (Kipf & Welling: 81.5%), reproduced through mgg's op."""

import pytest

from mgg.training.loop import TrainConfig, train


@pytest.mark.full  # make test-full (tests/conftest.py)
def test_gcn_cora_accuracy(cora):
    res = train(cora, TrainConfig(model="gcn"), progress=False)
    assert len(res["runs"]) == 5
    assert res["mean"] >= 0.80, res["mean"]
    assert abs(res["mean"] - 0.815) <= 0.015, res["mean"]


def test_gin_trains(cora):
    res = train(cora, TrainConfig(model="gin", epochs=60, seeds=(0,)), progress=False)
    assert res["mean"] > 0.65  # 2-layer GIN: about 75% on Cora; chance is 1/7


def test_protocol_defaults_follow_the_model_unless_given():
    from mgg import MggError
    from mgg.nn.models import PROTOCOLS

    gat = TrainConfig(model="gat")
    assert (gat.hidden, gat.lr, gat.weight_decay, gat.dropout, gat.epochs) == (8, 0.005, 5e-4, 0.6, 200)
    sage = TrainConfig(model="sage", lr=0.02)
    assert (sage.hidden, sage.lr, sage.dropout) == (PROTOCOLS["sage"].hidden, 0.02, 0.5)
    assert TrainConfig().hidden == 16 and TrainConfig(model="gin").hidden == 64
    with pytest.raises(MggError, match="model must be one of"):
        TrainConfig(model="mlp")


def test_sage_with_mgg_layers_follows_pyg_layers(cora):
    """The same script, seed and initial weights (SAGEConv draws PyG's): mgg's and PyG's layers
    train to the same validation accuracy curve, up to rounding."""
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    from mgg.training.loop import train_once

    curves = {}
    for name, mod in (("mgg", None), ("pyg", pyg_nn)):
        curve = curves[name] = []
        cfg = TrainConfig(model="sage", hidden=32, epochs=15, conv_module=mod)
        train_once(cora, cfg, 0, progress=False, on_epoch=lambda e, s, val, test, c=curve: c.append(val) and False)
    assert len(curves["mgg"]) == 15
    assert max(abs(a - b) for a, b in zip(curves["mgg"], curves["pyg"], strict=True)) <= 0.004  # 2 of 500 nodes
    assert curves["mgg"][-1] > 0.6


def test_on_epoch_ends_the_run_and_times_the_training_step(cora):
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    from mgg.training.loop import train_once

    seen = []
    res = train_once(
        cora,
        TrainConfig(model="gat", epochs=50, conv_module=pyg_nn),
        0,
        progress=False,
        on_epoch=lambda e, s, val, test: seen.append((e, s)) or e == 3,
    )
    assert res.epochs == 4 and [e for e, _ in seen] == [0, 1, 2, 3] and all(s > 0 for _, s in seen)
