"""mgg.ops.node_keep, node-feature dropout's keep mask (csrc/core/dropout.h): the CPU op and the CUDA
kernel (csrc/kernels/dropout.cu, run by the SIMT emulator, and on a GPU where there is one) equal an
independent Python implementation of the hash for every element; a block of rows and columns is that
block of the whole mask (so every rank and grid place draws the same); the draw moves with seed, step
and layer and keeps about 1 - p; bad arguments are one line."""

import numpy as np
import pytest
import torch

from mgg import functional, ops
from mgg.errors import MggError
from mgg.functional import node_dropout

M64 = (1 << 64) - 1


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def reference(nodes, col0: int, col1: int, seed: int, step: int, layer: int, p: float) -> torch.Tensor:
    """The mask in Python integers (the hash's definition, written apart from the C++)."""
    stream = _mix(_mix(((seed & M64) * 0x9E3779B97F4A7C15) & M64 ^ (step & M64)) ^ ((layer * 0xD1B54A32D192ED03) & M64))
    p32 = float(np.float32(p))
    out = torch.empty(len(nodes), col1 - col0, dtype=torch.bool)
    for i, v in enumerate(nodes.tolist()):
        z = _mix(stream ^ _mix(((v & M64) * 0x9E3779B97F4A7C15) & M64))
        for c in range(col0, col1):
            w = _mix(z ^ ((c * 0xD1B54A32D192ED03) & M64))
            out[i, c - col0] = float(np.float32(w >> 40) * np.float32(1 / 16777216)) >= p32
    return out


CASES = [  # nodes, col0, col1, seed, step, layer, p
    (torch.arange(40), 0, 13, 0, 0, 0, 0.5),
    (torch.tensor([7, 2**40 + 3, 0, 7, 99_999_999]), 5, 21, 123456789, 17, 2, 0.3),
    (torch.tensor([3, 1, 4, 1, 5]), 0, 1, -5, 1000, 7, 0.9),
    (torch.arange(20) * 1_000_003, 1000, 1031, 2**62, 3, 1, 0.0),
    (torch.empty(0, dtype=torch.int64), 0, 4, 1, 1, 1, 0.5),
]


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_the_cpu_op_is_the_hash(case):
    assert torch.equal(ops.node_keep(*case), reference(*case))


def test_a_block_is_the_whole_mask_s_block_and_the_draw_moves_with_step_layer_seed():
    whole = ops.node_keep(torch.arange(300), 0, 40, 7, 1, 0, 0.3)
    assert torch.equal(ops.node_keep(torch.tensor([5, 17, 250]), 10, 25, 7, 1, 0, 0.3), whole[[5, 17, 250], 10:25])
    for other in ((7, 2, 0), (7, 1, 1), (8, 1, 0)):
        assert not torch.equal(whole, ops.node_keep(torch.arange(300), 0, 40, *other, 0.3))
    assert abs(whole.double().mean().item() - 0.7) < 0.02


def test_node_dropout_scales_the_kept_and_zeroes_the_rest():
    x = torch.randn(50, 9, dtype=torch.float64)
    ids = torch.arange(100, 150)
    keep = ops.node_keep(ids, 3, 12, 4, 2, 1, 0.25)
    assert torch.equal(node_dropout(x, ids, 0.25, 4, 2, 1, 3), x * keep / 0.75)
    assert node_dropout(x, ids, 0.0, 4, 2, 1) is x
    y = x.clone()
    out = node_dropout(y, ids, 0.25, 4, 2, 1, 3, in_place=True)  # the grid's gathered table: no copy
    assert out is y and torch.equal(y, x * keep / 0.75)


@pytest.mark.parametrize("chunk", [None, 7, 20])  # the mask drawn whole, or a block of rows at a time
@pytest.mark.parametrize("in_place, grad_owned", [(False, False), (True, False), (False, True), (True, True)])
def test_node_dropout_gradient_is_the_mask_s(in_place, grad_owned, chunk, monkeypatch):
    if chunk:
        monkeypatch.setattr(functional, "MASK_CHUNK", chunk)  # 7: a row per block; 20: 2 rows and a short last
    x = torch.randn(41, 7, dtype=torch.float64, requires_grad=True)
    ids = torch.arange(7, 48)
    keep = ops.node_keep(ids, 2, 9, 5, 1, 0, 0.4)
    g = torch.randn(41, 7, dtype=torch.float64)
    h = x * 1.5  # a table of its own: the in-place drop writes it, not the leaf
    out = node_dropout(h, ids, 0.4, 5, 1, 0, 2, in_place=in_place, grad_owned=grad_owned)
    assert torch.equal(out, h.detach() * keep / 0.6 if not in_place else x.detach() * 1.5 * keep / 0.6)
    # the gradient reaching it: a new table (grad_owned: written in place) or one also read elsewhere
    seen = g.clone()
    out.backward(seen)
    assert torch.equal(x.grad, (g * keep / 0.6) * 1.5)
    # owned: dropped where it lies; else the caller's gradient left as it was
    assert torch.equal(seen, g * keep / 0.6 if grad_owned else g)
    assert torch.autograd.gradcheck(lambda t: node_dropout(t * 1.0, ids, 0.4, 5, 1, 0, 2, in_place), (x,))


def test_node_dropout_shapes_are_one_line():
    with pytest.raises(MggError, match=r"ids its rows' node ids \[rows\], got \[4, 3\] and \[5\]"):
        node_dropout(torch.zeros(4, 3), torch.arange(5), 0.5, 0, 0, 0)
    with pytest.raises(MggError, match="x must be"):
        node_dropout(torch.zeros(4), torch.arange(4), 0.5, 0, 0, 0)


@pytest.mark.parametrize(
    "args, message",
    [
        ((torch.arange(4).float(), 0, 3, 0, 0, 0, 0.5), "nodes must be int64"),
        ((torch.arange(4).view(2, 2), 0, 3, 0, 0, 0, 0.5), "nodes must be 1-D"),
        ((torch.arange(4), 5, 3, 0, 0, 0, 0.5), r"columns \[5, 3\) are not a range"),
        ((torch.arange(4), 0, 3, 0, 0, 0, 1.0), r"p must be in \[0, 1\)"),
    ],
)
def test_bad_arguments_are_one_line(args, message):
    with pytest.raises(RuntimeError, match=message):
        ops.node_keep(*args)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_the_cuda_op_is_the_hash(case):
    nodes, *rest = case
    assert torch.equal(ops.node_keep(nodes.cuda(), *rest).cpu(), reference(*case))


def test_the_cuda_kernel_is_the_hash_under_the_emulator(tmp_path):
    """The kernel's own source, launched by its launcher, on the SIMT emulator (simt/emulator.py)."""
    from simt import emulator

    if emulator.available() is not None:
        pytest.skip(emulator.available())
    folders = []
    for i, (nodes, col0, col1, seed, step, layer, p) in enumerate(CASES):
        values = dict(op="node_keep", seed=1, drop_seed=seed, step=step, layer=layer, p=p, rows=len(nodes), col0=col0)
        folders.append(emulator.write_case(tmp_path / str(i), dict(values, cols=col1 - col0), dict(nodes=nodes)))
    assert emulator.run_cases(folders) == ["ok"] * len(CASES)
    for folder, case in zip(folders, CASES, strict=True):
        want = reference(*case)
        got = torch.from_numpy(np.fromfile(folder / "mask.bin", dtype=np.uint8)).bool().reshape(want.shape)
        assert torch.equal(got, want)
