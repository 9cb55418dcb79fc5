"""Checkpoints of `mgg train`: everything the next epoch depends on, written so that a kill at any
moment leaves a checkpoint that loads right, and read back by a restarted run.

A checkpoint directory (--checkpoint DIR, on a filesystem every rank sees) holds

    DIR/ckpt-SSS-EEEEEE/          seed SSS (its index in the run's seeds), EEEEEE epochs done
        meta.json                 format and version, what run wrote it (identity), the seed's
                                  progress (best validation, times, curve), the seeds already done,
                                  and every file's bytes and CRC-32
        model.pt                  the replicated weights and optimiser state (rank 0 writes it)
        rank-RRRRR.pt             each rank's own: RNG states, dropout draw counters, tuners' state,
                                  and, where weights are sharded (the grid), its shard and its
                                  optimiser state

A save writes DIR/.partial-ckpt-SSS-EEEEEE (every rank its file, rank 0 model.pt and then meta.json
with the others' sizes and checksums), renames it into place when complete, and only then removes
checkpoints older than the one before it (KEEP). A resume takes the newest complete checkpoint whose
files all match meta.json (a damaged one is passed over, in a line, for the one before it), and refuses
in one line one written by another format or by another run (dataset, model, backend, world size,
partition). Files load with torch.load(weights_only=True): a checkpoint cannot run code."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import sys
import zlib
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist

from ..errors import MggError
from ..plan import Config
from ..version import __version__
from .record import Progress, RunResult

FORMAT, VERSION = "mgg-checkpoint", 1
KEEP = 2  # complete checkpoints kept: the newest and the one before it
PREFIX, PARTIAL = "ckpt-", ".partial-"
META, MODEL = "meta.json", "model.pt"


def checkpoint_name(seed_index: int, epoch: int) -> str:
    return f"{PREFIX}{seed_index:03d}-{epoch:06d}"


def rank_file(rank: int) -> str:
    return f"rank-{rank:05d}.pt"


@dataclass
class Saved:
    """A checkpoint chosen to resume from: the seeds it had finished, the seed in progress."""

    path: Path
    seed_index: int
    progress: Progress
    runs: list  # RunResult of the seeds before seed_index


class Checkpoints:
    """The checkpoints of one run (module docstring).

    Args:
        directory: DIR.
        every: save after every `every` epochs (and after a seed's last).
        identity: what must match for a resume: the dataset, model, training config, backend, world
            size, partition (mgg.training.checkpoint.identity).
        sharded: each rank holds its own weights (the grid), saved in its rank file; else rank 0
            saves the weights every rank holds.
    """

    def __init__(self, directory, every: int, identity: dict, sharded: bool = False):
        if int(every) < 1:
            raise MggError(f"--checkpoint-every must be at least 1 epoch, got {every}")
        self.dir, self.every, self.identity, self.sharded = Path(directory), int(every), identity, sharded
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        if self.dir.exists() and not self.dir.is_dir():
            raise MggError(f"--checkpoint {self.dir}: not a directory")

    # ---- the collectives of one process or a group -----------------------------------------------
    def _bcast(self, obj):
        if self.world == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def _gather(self, obj) -> list:
        if self.world == 1:
            return [obj]
        out: list = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def _agree(self, problem: Optional[str]) -> None:
        """Every rank raises the first rank's problem, if any rank has one."""
        for r, p in enumerate(self._gather(problem)):
            if p is not None:
                raise MggError(p if r == 0 else f"rank {r}: {p}")

    # ---- saving --------------------------------------------------------------------------------
    def due(self, progress: Progress, epochs: int) -> bool:
        return progress.epoch % self.every == 0 or progress.epoch == epochs

    def save(self, seed_index: int, progress: Progress, runs: list, model, opt) -> Path:
        """Writes the checkpoint of `progress` (seed `seed_index`, after `runs`); collective."""
        from ..distributed import watchdog

        watchdog.beat()
        name = checkpoint_name(seed_index, progress.epoch)
        tmp, final = self.dir / f"{PARTIAL}{name}", self.dir / name
        problem = None
        if self.rank == 0:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
                shutil.rmtree(tmp, ignore_errors=True)  # an earlier save of this name, cut short
                tmp.mkdir()
            except OSError as e:
                problem = f"{tmp}: cannot write the checkpoint ({e.strerror or e})"
        self._agree(problem)
        own = dict(rng=rng_state(), draws=draws_of(model), tuners=tuner_states(model))
        if self.sharded:
            own.update(model=model.state_dict(), optimizer=opt.state_dict())
        files, problem = {}, None
        try:
            files[rank_file(self.rank)] = _write(tmp / rank_file(self.rank), own)
            if self.rank == 0 and not self.sharded:
                files[MODEL] = _write(tmp / MODEL, dict(model=model.state_dict(), optimizer=opt.state_dict()))
        except OSError as e:
            problem = f"{tmp}: cannot write the checkpoint ({e.strerror or e})"
        every = self._gather((files, problem))
        self._agree(next((p for _, p in every if p), None))
        if self.rank == 0:
            meta = dict(
                format=FORMAT,
                version=VERSION,
                mgg=_mgg_version(),
                written=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                identity=self.identity,
                world=self.world,
                seed_index=seed_index,
                progress=progress.as_dict(),
                runs=[_plain(asdict(r)) for r in runs],
                files={k: v for f, _ in every for k, v in f.items()},
            )
            try:
                _write_bytes(tmp / META, json.dumps(meta, indent=1).encode())
                _fsync_dir(tmp)
                if final.exists():  # the same epoch saved again (a resumed run): the new one replaces it
                    shutil.rmtree(final)
                os.rename(tmp, final)
                _fsync_dir(self.dir)
                self._prune(final)
            except OSError as e:
                problem = f"{final}: cannot complete the checkpoint ({e.strerror or e})"
        self._agree(problem)
        watchdog.beat()
        return final

    def _prune(self, newest: Path) -> None:
        """Removes complete checkpoints beyond KEEP and partial ones (rank 0, after a save)."""
        done = sorted(p for p in self.dir.glob(f"{PREFIX}*") if p.is_dir())
        for p in done[: max(0, done.index(newest) + 1 - KEEP)]:
            shutil.rmtree(p, ignore_errors=True)
        for p in self.dir.glob(f"{PARTIAL}{PREFIX}*"):
            if p.name != f"{PARTIAL}{newest.name}":
                shutil.rmtree(p, ignore_errors=True)

    # ---- resuming ------------------------------------------------------------------------------
    def latest(self) -> Optional[Saved]:
        """The checkpoint to resume from (None: DIR holds none); collective. Rank 0 checks every
        file against meta.json and says which checkpoint it resumes from."""
        from ..distributed import watchdog

        watchdog.beat()
        choice, problem = None, None
        if self.rank == 0:
            try:
                choice = self._choose()
            except MggError as e:
                problem = str(e)
        self._agree(problem)
        choice = self._bcast(choice)
        if choice is None:
            return None
        path, meta = Path(choice[0]), choice[1]
        p = Progress.from_dict(meta["progress"])
        runs = [_run_back(r) for r in meta["runs"]]
        return Saved(path, int(meta["seed_index"]), p, runs)

    def _choose(self) -> Optional[tuple]:
        if not self.dir.is_dir():
            return None
        found = sorted((p for p in self.dir.glob(f"{PREFIX}*") if p.is_dir()), reverse=True)
        damaged = []
        for path in found:
            meta, why = self._read_meta(path)
            if why is None:
                self._check_identity(path, meta)
                for d in damaged:
                    print(f"mgg: {d}; resuming from the one before it, {path}", file=sys.stderr, flush=True)
                p = meta["progress"]
                print(
                    f"mgg: resuming from {path} at epoch {p['epoch']} of seed {p['seed']}",
                    file=sys.stderr,
                    flush=True,
                )
                return str(path), meta
            damaged.append(f"{path}: {why}")
        if damaged:
            raise MggError(
                f"{self.dir}: no complete checkpoint ({'; '.join(damaged)}): remove them or give another --checkpoint"
            )
        return None

    def _read_meta(self, path: Path) -> tuple:
        """(meta, None), or (None, what is wrong with the checkpoint's files). A checkpoint of another
        format raises: no earlier one of the same directory would load either."""
        try:
            meta = json.loads((path / META).read_text())
        except FileNotFoundError:
            return None, f"no {META} (not complete)"
        except (OSError, ValueError) as e:
            return None, f"{META} unreadable ({str(e)[:80]})"
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise MggError(f"{path / META}: not an mgg checkpoint (format {meta.get('format')!r})")
        if meta.get("version") != VERSION:
            raise MggError(
                f"{path / META}: checkpoint format version {meta.get('version')} (written by mgg {meta.get('mgg')}); "
                f"this mgg ({_mgg_version()}) reads version {VERSION}"
            )
        for name, want in meta["files"].items():
            f = path / name
            if not f.is_file():
                return None, f"{name} is missing"
            size = f.stat().st_size
            if size != want["bytes"]:
                return None, f"{name} is {size:,} bytes, {want['bytes']:,} written (truncated or overwritten)"
            if zlib.crc32(f.read_bytes()) != want["crc32"]:
                return None, f"{name} does not match its checksum (damaged)"
        if meta.get("world") != self.world:
            raise MggError(
                f"{path / META}: written by a run of {meta.get('world')} ranks; this run has {self.world}: "
                "resume with the same world size, or give another --checkpoint"
            )
        needed = {rank_file(r) for r in range(self.world)} | (set() if self.sharded else {MODEL})
        if not needed <= set(meta["files"]):
            return None, f"files {sorted(needed - set(meta['files']))} are not in {META}"
        return meta, None

    def _check_identity(self, path: Path, meta: dict) -> None:
        saved = meta.get("identity", {})
        differ = [k for k in sorted(set(saved) | set(self.identity)) if saved.get(k) != self.identity.get(k)]
        if differ:
            said = ", ".join(f"{k} {_short(saved.get(k))} (this run: {_short(self.identity.get(k))})" for k in differ)
            raise MggError(
                f"{path / META}: written by another run: {said}; resume with the same settings, or give another "
                "--checkpoint"
            )

    def restore(self, saved: Saved, model, opt) -> None:
        """Loads the weights, optimiser state, RNG states, dropout draws and tuners of `saved` into this
        rank's model and optimiser; collective (a rank's problem ends every rank)."""
        problem = None
        try:
            own = _read(saved.path / rank_file(self.rank))
            state = own if self.sharded else _read(saved.path / MODEL)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            set_rng_state(own["rng"])
            set_draws(model, own["draws"])
            set_tuner_states(model, own["tuners"])
        except (OSError, RuntimeError, KeyError, ValueError) as e:
            problem = f"{saved.path}: cannot load ({str(e).splitlines()[0][:160]})"
        self._agree(problem)


def identity(dataset: str, cfg, **strategy) -> dict:
    """What a resume must match: the dataset's identity, the training config (but the device) and
    the strategy (backend, world size, partition, grid...)."""
    from dataclasses import fields

    train = {f.name: _plain(getattr(cfg, f.name)) for f in fields(cfg) if f.name not in ("device", "conv_module")}
    return dict(dataset=dataset, **train, **{k: _plain(v) for k, v in strategy.items()})


def dataset_identity(ds) -> str:
    """A dataset's identity: a prepared part's manifest id, or the name, the graph's fingerprint and a
    CRC-32 of the features, labels and split."""
    manifest = getattr(ds, "manifest", None)
    if manifest is not None:
        return f"{manifest.name}:prepared:{manifest.id}"
    crc = 0
    for t in (ds.x, ds.y, ds.train_mask, ds.val_mask, ds.test_mask):
        crc = zlib.crc32(memoryview(t.detach().cpu().contiguous().numpy()).cast("B"), crc)
    return f"{ds.name}:{ds.graph.fingerprint()}:{crc:08x}"


def partition_identity(bounds, perm=None) -> str:
    """The rows each rank owns, as a checksum of the partition's bounds (and its permutation)."""
    crc = zlib.crc32(np.ascontiguousarray(np.asarray(bounds, dtype=np.int64)).tobytes())
    if perm is not None:
        crc = zlib.crc32(np.ascontiguousarray(np.asarray(perm, dtype=np.int64)).tobytes(), crc)
    return f"{crc:08x}"


# ---- what a rank holds besides weights -------------------------------------------------------------
def rng_state() -> dict:
    state = dict(
        torch=torch.get_rng_state(),
        numpy=_numpy_state(),
        python=random.getstate(),
    )
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    random.setstate(_tuples(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _numpy_state() -> list:
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return [kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)]


def _tuples(v):
    return tuple(_tuples(x) for x in v) if isinstance(v, (list, tuple)) else v


def draws_of(model) -> dict:
    """The dropout draw counters of the model's modules (each module with draws(): mgg.nn's models,
    GATConv, the grid's GridNet), by module name."""
    return {name: m.draws() for name, m in model.named_modules() if callable(getattr(m, "draws", None))}


def set_draws(model, state: dict) -> None:
    mods = dict(model.named_modules())
    for name, d in state.items():
        mods[name].set_draws(d)


def tuner_states(model) -> dict:
    return {name: m.tuner.state() for name, m in model.named_modules() if getattr(m, "tuner", None) is not None}


def set_tuner_states(model, state: dict) -> None:
    mods = dict(model.named_modules())
    for name, s in state.items():
        mods[name].tuner.restore(s)


# ---- files ---------------------------------------------------------------------------------------
def _write(path: Path, obj) -> dict:
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    _write_bytes(path, data)
    return dict(bytes=len(data), crc32=zlib.crc32(data))


def _write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(path: Path):
    return torch.load(path, map_location="cpu", weights_only=True)


def _mgg_version() -> str:
    return __version__


def _plain(v):
    """JSON's values for a run's records: a Config as its fields, tuples as lists."""
    if isinstance(v, Config):
        return {"config": [v.ps, v.dist, v.wpb, v.interleave, v.order]}
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _back(v):
    if isinstance(v, dict):
        if set(v) == {"config"}:
            ps, dist_, wpb, inter, order = v["config"]
            return Config(ps, dist_, wpb, inter, order)
        return {k: _back(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_back(x) for x in v]
    return v


def _run_back(d: dict) -> RunResult:
    r = RunResult(**{k: _back(v) for k, v in d.items()})
    r.curve = [tuple(c) for c in r.curve]
    for t in r.tuning:
        t["trajectory"] = [tuple(step) for step in t.get("trajectory", [])]
    return r


def _short(v) -> str:
    s = json.dumps(v, sort_keys=True) if not isinstance(v, str) else v
    return s if len(s) <= 80 else s[:77] + "..."
