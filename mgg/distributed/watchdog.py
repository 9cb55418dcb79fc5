"""A rank that waits too long for the others ends the job, and says who did not come.

Each rank's watchdog (a thread, started by mgg.distributed.process.init_from_env) is armed by each
epoch's beat of the training loop and disarmed when a seed's epochs end (a checkpoint's save and load
beat too, without arming it); when a rank has not beaten for
the timeout (it waits in a collective that some rank never joined), or a collective fails because a
peer's connection closed, the rank writes its epoch under its rank in the job's store, waits a few
seconds for the other ranks that are still alive to do the same, and ends with one line naming the
ranks that did not (stopped, lost or far slower) and exit status EXIT_CODE, which torchrun's
--max-restarts restarts. The process group's own timeout is the watchdog's plus SLACK, so the line
comes before the backend's error (NCCL's watchdog aborts without naming anyone)."""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import timedelta
from typing import Optional

import torch.distributed as dist

SLACK = timedelta(seconds=30)
GRACE_S = 5.0  # how long a rank that gave up waits for the word of the other ranks still alive
EXIT_CODE = 75  # EX_TEMPFAIL: the job may be retried (torchrun --max-restarts)

_current: Optional["Watchdog"] = None


class Watchdog:
    """This rank's watchdog over a store the job's ranks share (module docstring)."""

    def __init__(self, store, rank: int, world: int, timeout_s: float):
        self.store, self.rank, self.world, self.timeout_s = store, rank, world, float(timeout_s)
        self.epoch: Optional[int] = None
        self._last = time.monotonic()
        self._armed = False
        self._stop = threading.Event()
        self._gave_up = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="mgg-watchdog", daemon=True)
        self._thread.start()

    def beat(self, epoch: Optional[int] = None) -> None:
        """This rank is making progress; the beat of an epoch (`epoch` given) arms the watchdog."""
        self._last = time.monotonic()
        if epoch is not None:
            self.epoch, self._armed = epoch, True

    def pause(self) -> None:
        """Disarms the watchdog until the next epoch's beat (between seeds, after training)."""
        self._armed = False

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        tick = min(1.0, self.timeout_s / 20)
        while not self._stop.wait(tick):
            if self._armed and time.monotonic() - self._last > self.timeout_s:
                self.give_up(f"waited {self.timeout_s:g} s for the other ranks")

    def give_up(self, why: str) -> None:
        """Names the ranks that did not arrive (module docstring) in one line and ends this process."""
        if not self._gave_up.acquire(blocking=False):
            return  # the other thread is already at it
        missing = self.missing()
        at = f" at epoch {self.epoch}" if self.epoch is not None else ""
        if missing is None:
            who = "the job's store does not answer (its host, rank 0 or torchrun's agent, is gone)"
        elif missing:
            ranks = f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}"
            who = f"{ranks} did not arrive (stopped, lost or far slower)"
        else:
            who = "every rank is alive but none got further: an epoch takes longer than the timeout (raise --timeout)"
        print(
            f"mgg: rank {self.rank}{at}: {why}: {who}; ending the job (exit {EXIT_CODE})", file=sys.stderr, flush=True
        )
        sys.stdout.flush()
        os._exit(EXIT_CODE)

    def missing(self) -> Optional[list]:
        """The ranks that have not written their word within GRACE_S of this rank's (None: the store
        does not answer)."""
        try:
            self.store.set_timeout(timedelta(seconds=GRACE_S))
            self.store.set(f"gave-up/{self.rank}", str(self.epoch))
            keys = {r: f"gave-up/{r}" for r in range(self.world)}
            deadline = time.monotonic() + GRACE_S
            while True:
                waiting = [r for r, k in keys.items() if not self.store.check([k])]
                if not waiting or time.monotonic() > deadline:
                    return waiting
                time.sleep(0.1)
        except Exception:  # the store's host is gone: nobody can be asked
            return None


def start(store, rank: int, world: int, timeout_s: float) -> Watchdog:
    """Starts this process's watchdog (one per process; a second start replaces the first)."""
    global _current
    if _current is not None:
        _current.stop()
    _current = Watchdog(store, rank, world, timeout_s)
    return _current


def current() -> Optional[Watchdog]:
    """This process's watchdog (None: not a rank of a job joined by init_from_env)."""
    return _current


def beat(epoch: Optional[int] = None) -> None:
    """The training loop's beat (nothing in one process)."""
    if _current is not None:
        _current.beat(epoch)


def pause() -> None:
    """Disarms the watchdog until the next epoch (nothing in one process)."""
    if _current is not None:
        _current.pause()


def stop() -> None:
    """Disarms the watchdog (the job is ending normally)."""
    if _current is not None:
        _current.stop()


def is_peer_failure(e: BaseException) -> bool:
    """Whether `e` is a collective failing because a peer is gone or late (gloo's transport error, a
    backend's or network's DistError), not an error of this rank's own."""
    return isinstance(e, dist.DistError) or (isinstance(e, RuntimeError) and "gloo" in str(e))


def on_peer_failure(e: BaseException) -> None:
    """A collective failed (is_peer_failure): name the missing ranks and end, as a timed-out wait does."""
    if _current is not None and is_peer_failure(e):
        _current.give_up(f"a collective failed ({str(e).splitlines()[0][:120]})")
