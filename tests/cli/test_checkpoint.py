"""Checkpoints of mgg train in one process (mgg.training.checkpoint): a resumed run follows the
uninterrupted run's curve exactly (deterministic mode), whichever checkpoint it resumes from; a damaged
newest checkpoint is passed over, in a line, for the one before it; a checkpoint of another run,
another format or no complete checkpoint at all is refused in one line; a save cut short leaves the
checkpoints before it as they were. Killed and stopped ranks under torchrun: tests/distributed/test_elastic.py."""

import dataclasses
import json
import shutil
import zlib

import pytest
import torch

import mgg.training.checkpoint as checkpoint
from mgg import MggError
from mgg.training.checkpoint import Checkpoints, dataset_identity, identity
from mgg.training.loop import TrainConfig, train

EPOCHS = 8


def _cfg(**kw):
    return TrainConfig(**dict(dict(model="gcn", epochs=EPOCHS, seeds=(0,), device="cpu", deterministic=True), **kw))


def _saver(ds, cfg, folder, every=3):
    return Checkpoints(folder, every, identity(dataset_identity(ds), cfg, backend="one process", world=1))


def _run(ds, cfg, folder, every=3):
    return train(ds, cfg, progress=False, checkpoints=_saver(ds, cfg, folder, every))


def _curves(res):
    return [(r.seed, r.curve, r.best_epoch, r.test_acc) for r in res["runs"]]


@pytest.fixture(scope="module")
def reference(cora):
    return _curves(train(cora, _cfg(seeds=(0, 1)), progress=False))


@pytest.fixture
def saved(cora, tmp_path):
    """A finished run's checkpoint directory (seeds 0 and 1; every 3 epochs: 3 and 6 of seed 0, then
    seed 1's; the newest two kept)."""
    res = _run(cora, _cfg(seeds=(0, 1)), tmp_path / "ck")
    return tmp_path / "ck", res


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_checkpoints_leave_the_curve_as_it_was_and_keep_the_newest_two(cora, reference, saved):
    folder, res = saved
    assert _curves(res) == reference  # saving changes nothing
    assert _names(folder) == ["ckpt-001-000006", "ckpt-001-000008"]
    meta = json.loads((folder / "ckpt-001-000008" / "meta.json").read_text())
    assert meta["progress"]["epoch"] == EPOCHS and len(meta["runs"]) == 1
    for name, f in meta["files"].items():
        data = (folder / "ckpt-001-000008" / name).read_bytes()
        assert (len(data), zlib.crc32(data)) == (f["bytes"], f["crc32"])


@pytest.mark.parametrize("every, at", [(3, "epoch 6 of seed 1"), (8, "epoch 8 of seed 0")])
def test_a_resumed_run_follows_the_uninterrupted_curve_exactly(cora, reference, tmp_path, capfd, every, at):
    """Killed after seed 1's epoch 7 (its last checkpoint gone): resumed in the middle of seed 1
    (every 3 epochs: from epoch 6), or between seeds (every 8: seed 0 done, seed 1 from its start);
    every epoch's loss and accuracies are the uninterrupted run's."""
    folder = tmp_path / "ck"
    _run(cora, _cfg(seeds=(0, 1)), folder, every)
    shutil.rmtree(folder / "ckpt-001-000008")
    capfd.readouterr()
    assert _curves(_run(cora, _cfg(seeds=(0, 1)), folder, every)) == reference
    err = capfd.readouterr().err
    assert f"resuming from {folder}/ckpt-" in err and f"at {at}" in err, err


@pytest.mark.parametrize(
    "damage, said",
    [
        (lambda p: p.write_bytes(p.read_bytes()[:-10]), "truncated or overwritten"),
        (lambda p: p.write_bytes(bytes([p.read_bytes()[0] ^ 1]) + p.read_bytes()[1:]), "does not match its checksum"),
        (lambda p: p.unlink(), "is missing"),
    ],
)
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(cora, reference, saved, capfd, damage, said):
    folder, _ = saved
    damage(folder / "ckpt-001-000008" / "model.pt")
    res = _run(cora, _cfg(seeds=(0, 1)), folder)
    assert _curves(res) == reference
    err = capfd.readouterr().err
    assert f"{folder / 'ckpt-001-000008'}: model.pt" in err and said in err
    assert f"resuming from the one before it, {folder / 'ckpt-001-000006'}" in err


def test_a_checkpoint_without_its_meta_is_not_complete(cora, reference, saved, capfd):
    folder, _ = saved
    (folder / "ckpt-001-000008" / "meta.json").unlink()
    assert _curves(_run(cora, _cfg(seeds=(0, 1)), folder)) == reference
    assert "no meta.json (not complete)" in capfd.readouterr().err


def test_no_complete_checkpoint_is_refused(cora, saved):
    folder, _ = saved
    for name in _names(folder):
        (folder / name / "rank-00000.pt").write_bytes(b"")
    with pytest.raises(MggError, match=r"no complete checkpoint .*rank-00000.pt is 0 bytes"):
        _run(cora, _cfg(seeds=(0, 1)), folder)


@pytest.mark.parametrize(
    "change, said",
    [
        (dict(hidden=32), r"hidden 16 \(this run: 32\)"),
        (dict(lr=0.02), r"lr 0.01 \(this run: 0.02\)"),
        (dict(seeds=(0, 2)), r"seeds \[0, 1\] \(this run: \[0, 2\]\)"),
        (dict(deterministic=False), r"deterministic true \(this run: false\)"),
    ],
)
def test_a_checkpoint_of_another_training_config_is_refused(cora, saved, change, said):
    folder, _ = saved
    with pytest.raises(MggError, match=r"meta.json: written by another run: " + said):
        _run(cora, _cfg(**dict(dict(seeds=(0, 1)), **change)), folder)


def test_a_checkpoint_of_another_dataset_is_refused(cora, saved):
    folder, _ = saved
    other = dataclasses.replace(cora, x=cora.x.clone())
    other.x[0, 0] += 1.0  # one feature changed
    with pytest.raises(MggError, match=r"written by another run: dataset cora:"):
        _run(other, _cfg(seeds=(0, 1)), folder)


@pytest.mark.parametrize(
    "edit, said",
    [
        (dict(version=2), r"checkpoint format version 2 \(written by mgg .*\); this mgg \(.*\) reads version 1"),
        (dict(format="other"), r"not an mgg checkpoint \(format 'other'\)"),
        (dict(world=4), r"written by a run of 4 ranks; this run has 1"),
        ({"identity/backend": "halo"}, r"backend halo \(this run: one process\)"),
    ],
)
def test_another_format_world_or_backend_is_refused(cora, saved, edit, said):
    folder, _ = saved
    path = folder / "ckpt-001-000008" / "meta.json"
    meta = json.loads(path.read_text())
    for k, v in edit.items():
        if k.startswith("identity/"):
            meta["identity"][k.split("/")[1]] = v
        else:
            meta[k] = v
    path.write_text(json.dumps(meta))
    with pytest.raises(MggError, match=said):
        _run(cora, _cfg(seeds=(0, 1)), folder)


def test_a_save_cut_short_leaves_the_checkpoints_before_it_as_they_were(cora, reference, tmp_path, monkeypatch):
    folder = tmp_path / "ck"
    write, calls = checkpoint._write, []

    def dies_in_the_third_save(path, obj):
        calls.append(path)
        if len(calls) == 5:  # every save writes two files: the third save's first
            path.write_bytes(b"\0" * 50)
            raise KeyboardInterrupt  # the process is killed here
        return write(path, obj)

    monkeypatch.setattr(checkpoint, "_write", dies_in_the_third_save)
    with pytest.raises(KeyboardInterrupt):
        _run(cora, _cfg(seeds=(0, 1)), folder)
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and ".partial" not in str(p)}
    assert _names(folder) == [".partial-ckpt-000-000008", "ckpt-000-000003", "ckpt-000-000006"]
    monkeypatch.setattr(checkpoint, "_write", write)
    assert _curves(_run(cora, _cfg(seeds=(0, 1)), folder)) == reference
    assert not (folder / ".partial-ckpt-000-000008").exists()  # replaced by the next complete save
    assert all(not p.exists() or p.read_bytes() == b for p, b in before.items())  # never written again


def test_an_unwritable_directory_is_one_line(cora, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(MggError, match="not a directory"):
        _run(cora, _cfg(), tmp_path / "file")
    with pytest.raises(MggError, match="at least 1 epoch"):
        _run(cora, _cfg(), tmp_path / "ck", every=0)


def test_rng_states_come_back(tmp_path):
    """A checkpoint restores torch's, numpy's and Python's generators (a model drawing its dropout
    from torch's generator resumes with the same masks)."""
    import random

    import numpy as np

    state = checkpoint.rng_state()
    want = (torch.rand(3), np.random.rand(2), random.random())
    checkpoint._write(tmp_path / "rng.pt", state)
    torch.rand(5), np.random.rand(5), random.random()
    checkpoint.set_rng_state(checkpoint._read(tmp_path / "rng.pt"))
    got = (torch.rand(3), np.random.rand(2), random.random())
    assert torch.equal(got[0], want[0]) and np.array_equal(got[1], want[1]) and got[2] == want[2]


def test_a_finished_tuning_comes_back(cora, tmp_path):
    """--autotune: a checkpoint keeps each layer's chosen config and its measurements; the resumed
    run takes them up instead of searching again."""
    from mgg.runtime.online import OnlineTuner

    cfg = _cfg(autotune=True, epochs=20)
    res = _run(cora, cfg, tmp_path / "ck", every=20)
    tuned = res["runs"][0].tuning
    assert tuned and all(t["chosen"] is not None for t in tuned)
    states = torch.load(tmp_path / "ck" / "ckpt-000-000020" / "rank-00000.pt", weights_only=True)["tuners"]
    assert len(states) == len(tuned)
    for state, t in zip(states.values(), tuned, strict=True):
        fresh = OnlineTuner(use_cache=False)
        fresh.restore(state)
        assert fresh.done and fresh.summary()["chosen"] == t["chosen"]
        assert fresh.summary()["trajectory"] == t["trajectory"]


def test_gat_resumes_with_its_attention_dropout_s_draws(cora, tmp_path):
    """GAT's attention dropout draws from its own seed and count of calls (GATConv.draws): a resumed
    run draws the masks the uninterrupted run drew."""
    cfg = _cfg(model="gat", epochs=6)
    want = _curves(train(cora, cfg, progress=False))
    _run(cora, cfg, tmp_path / "ck", every=4)
    shutil.rmtree(tmp_path / "ck" / "ckpt-000-000006")
    assert _curves(_run(cora, cfg, tmp_path / "ck", every=4)) == want
