"""Under torchrun (gloo), possibly restarted (--max-restarts): mgg train's loop on Cora (GCN,
deterministic) for each backend given, each with its checkpoint directory, and a failure injected
once per event: the victim rank SIGKILLs itself at an epoch ("kill"), SIGKILLs itself half-way
through writing its file of a checkpoint ("save"), or SIGSTOPs itself ("stop"). A marker file, written
before the failure, keeps a restarted worker from failing again. Rank 0 writes every backend's curve
and best epoch as JSON.

    torchrun ... tests/workers/elastic_worker.py OUT DIR EPOCHS EVERY VICTIM TIMEOUT_MIN BACKEND[@EVENT:EPOCH] ...

DIR "-": no checkpoints (the uninterrupted reference)."""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import torch.distributed as dist  # noqa: E402

import mgg.distributed.watchdog as watchdog  # noqa: E402
import mgg.training.checkpoint as checkpoint  # noqa: E402
from mgg.data import load_dataset  # noqa: E402
from mgg.distributed.process import exit_rank  # noqa: E402
from mgg.training import TrainConfig  # noqa: E402

EVENT = {}  # the event of the backend running now: kind, epoch, marker path


def _fail(kind: str) -> None:
    marker = EVENT["marker"]
    with open(marker, "w") as f:
        f.write(kind)
        f.flush()
        os.fsync(f.fileno())
    print(
        f"victim rank {dist.get_rank()}: {kind} at {time.time():.3f} (pid {os.getpid()})", file=sys.stderr, flush=True
    )
    os.kill(os.getpid(), signal.SIGSTOP if kind == "stop" else signal.SIGKILL)


def _armed(kind: str, epoch: int) -> bool:
    return (
        EVENT.get("kind") == kind
        and EVENT["epoch"] == epoch
        and dist.get_rank() == EVENT["victim"]
        and not os.path.exists(EVENT["marker"])
    )


_beat = watchdog.beat


def beat(epoch=None):
    _beat(epoch)
    for kind in ("kill", "stop"):
        if epoch is not None and _armed(kind, epoch):
            _fail(kind)


_write = checkpoint._write


def write(path, obj):
    epoch = int(path.parent.name.rsplit("-", 1)[1])
    if path.name.startswith("rank-") and _armed("save", epoch):
        with open(path, "wb") as f:  # half a file, then the kill
            f.write(b"\0" * 100)
        _fail("save")
    return _write(path, obj)


watchdog.beat = beat
checkpoint._write = write


def main():
    out, folder, epochs, every, victim, timeout = sys.argv[1:7]
    ds = load_dataset("cora")
    cfg = TrainConfig(model="gcn", epochs=int(epochs), seeds=(0,), device="cpu", deterministic=True)
    curves = {}
    for spec in sys.argv[7:]:
        backend, _, event = spec.partition("@")
        kind, _, at = event.partition(":")
        ckpt = None if folder == "-" else os.path.join(folder, backend)
        EVENT.clear()
        if kind:
            marker = os.path.join(folder, f"{backend}-{kind}-{at}.done")
            EVENT.update(kind=kind, epoch=int(at), victim=int(victim), marker=marker)
        kw = dict(progress=False, checkpoint=ckpt, checkpoint_every=int(every), timeout_min=float(timeout))
        if backend == "grid":
            from mgg.training.grid import train as train_grid

            res = train_grid(ds, cfg, "auto", **kw)
        else:
            from mgg.training.torchrun import train as train_ranks

            res = train_ranks(ds, cfg, backend, **kw)
        run = res["runs"][0]
        curves[backend] = dict(curve=run.curve, best=run.best_epoch, test=run.test_acc)
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(curves, f)
    exit_rank(0)


if __name__ == "__main__":
    main()
