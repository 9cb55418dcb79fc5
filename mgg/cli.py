"""The `mgg` command: info, partition, train, tune, bench."""

from __future__ import annotations

import argparse
import json
import sys

from .errors import MggError


def _table(rows: list[dict]) -> str:
    from rich.console import Console
    from rich.table import Table

    t = Table()
    for k in rows[0]:
        # a name (method, backend) is never cut; numbers and headers may be, when the columns are many
        names = [str(r[k]) for r in rows if isinstance(r[k], str)]
        t.add_column(k, justify="right", min_width=max(map(len, names), default=None), no_wrap=True)
    for r in rows:
        t.add_row(*(f"{v:.4f}" if isinstance(v, float) else str(v) for v in r.values()))
    con = Console(record=True, width=160)
    with con.capture() as cap:
        con.print(t)
    return cap.get()


def _dataset(args):
    from .data import load_dataset
    from .errors import GraphError

    ds = load_dataset(args.dataset, args.data_dir)
    if ds.y.dim() != 1:
        raise GraphError(
            f"{ds.name}: {ds.y.size(1)} labels per node (multi-label); mgg train does single-label node classification"
        )
    return ds


def cmd_info(args):
    if args.graph is not None:
        from .info import graph_facts, print_graph_facts

        facts = graph_facts(args.graph, args.data_dir, args.relabel)
        print(json.dumps(facts, indent=2) if args.json else print_graph_facts(facts), end="\n" if args.json else "")
        return
    from .info import collect

    facts = collect()
    if args.json:
        print(json.dumps(facts, indent=2))
    else:
        for k, v in facts.items():
            print(f"{k:28s} {v}")


def _partition_rows(ranks: list[dict], total: dict) -> list[dict]:
    """The per-rank statistics and a last row with the totals."""
    keys = [k for k in ranks[0] if k != "allgather_rows"]  # N - nodes: in --json, and in --method all's table
    last = dict(total, rank="total", send_rows=total["halo_rows"])  # every row sent is a row received
    return [{k: row[k] for k in keys} for row in (*ranks, last)]


COMPARE = (
    "method",
    "local_edges",
    "remote_edges",
    "remote_fraction",
    "halo_rows",
    "max_send_rows",
    "max_recv_rows",
    "send_max_over_mean",
    "allgather_rows",
    "max_send_peer",
    "edge_imbalance",
    "node_imbalance",
    "seconds",
    "cached",
)


def cmd_partition(args):
    from .data import load_graph
    from .errors import MissingPackageError
    from .partitioning import METHODS, partition

    g = load_graph(args.graph, args.data_dir, relabel=args.relabel)
    methods = METHODS if args.method == "all" else (args.method,)
    if args.ranks == 1 and args.method != "range":
        print("mgg partition: 1 rank: nothing to partition (every method gives the identity)", file=sys.stderr)
    results, skipped = [], []
    for m in methods:
        try:
            r = partition(g, args.ranks, m, seed=args.seed, cache=not args.no_cache)
        except MissingPackageError as e:
            if args.method != "all":
                raise
            skipped.append(str(e))
            print(f"mgg partition: skipping {m}: {e}", file=sys.stderr)
            continue
        ranks, total = r.stats(g)
        results.append(dict(method=m, total=total, ranks=ranks))
    head = dict(graph=args.graph, nodes=g.num_nodes, edges=g.num_edges, num_ranks=args.ranks, seed=args.seed)
    if args.json:
        out = dict(head, methods=results, skipped=skipped) if args.method == "all" else dict(head, **results[0])
        print(json.dumps(out, indent=2))
        return
    print(f"{args.graph}: {g.num_nodes} nodes, {g.num_edges} edges, {args.ranks} ranks", end="")
    if args.method == "all":
        print(
            " (halo_rows: rows all ranks receive, the communication volume; max_send_peer: the most rows one "
            "rank sends to one peer)"
        )
        print(_table([{k: res["total"][k] for k in COMPARE} for res in results]), end="")
        return
    t = results[0]["total"]
    print(f", method {t['method']} ({t['seconds']:.3f} s{', from the cache' if t['cached'] else ''})")
    print(_table(_partition_rows(results[0]["ranks"], t)), end="")


def cmd_prepare(args):
    import time

    import numpy as np

    from .partitioning.prepare import default_budget, prepare

    budget = default_budget() if args.budget is None else int(args.budget * 2**20)
    t0 = time.perf_counter()
    m = prepare(
        args.source,
        args.out,
        args.parts,
        args.method,
        args.seed,
        budget,
        args.data_dir,
        overwrite=args.overwrite,
        progress=not args.quiet,
    )
    sizes = np.diff(m.bounds).tolist()
    total = sum(e.bytes for e in m.files.values())
    print(
        f"{m.name}: {m.num_nodes:,} nodes, {m.num_edges:,} edges, {m.num_features} features -> {args.out}: "
        f"{m.parts} parts by {m.method} ({min(sizes):,}-{max(sizes):,} nodes each), {total / 2**20:.1f} MiB, "
        f"{time.perf_counter() - t0:.1f} s"
    )


def cmd_parts(args):
    from .data.prepared import Prepared

    prepared = Prepared(args.dir)
    g = args.gpus_per_node
    ranks = [args.rank] if args.rank is not None else list(range(args.node * g, (args.node + 1) * g))
    if g < 1 or not all(0 <= r < args.ranks for r in ranks):
        raise MggError(f"ranks {ranks[0]}-{ranks[-1]} lie outside a run of {args.ranks} ranks")
    print("\n".join(prepared.files_of_ranks(ranks, args.ranks)))


def cmd_train(args):
    import os
    from pathlib import Path

    from .data.prepared import is_prepared
    from .devices import choose_device
    from .plan import Config
    from .training import TrainConfig, train

    choice = choose_device(args.device)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, rank 0 speaks for every rank
        print(choice.line("mgg train"), flush=True)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    # a prepared dataset under torchrun: each rank reads only its part (in one process: all of it)
    ds = Path(args.dataset) if distributed and is_prepared(args.dataset) else _dataset(args)
    cfg = TrainConfig(
        model=args.model,
        hidden=args.hidden,
        layers=args.layers,
        epochs=args.epochs,
        lr=args.lr,
        weight_decay=args.weight_decay,
        dropout=args.dropout,
        seeds=tuple(range(args.seeds)),
        device=choice.device.type if distributed else str(choice.device),  # a rank takes its local GPU
        config=Config(args.ps, args.dist, args.wpb, order=args.order),
        autotune=args.autotune,
        deterministic=args.deterministic,
    )
    if args.replication not in (None, 1) and args.backend not in ("sa-1.5d", "cagnet-1.5d", "auto"):
        raise MggError(f"--replication applies to the 1.5D backends (sa-1.5d, cagnet-1.5d), not {args.backend}")
    if args.backend == "auto":
        _choose_strategy(args, ds, cfg, distributed)
    if args.backend == "grid":  # Plexus's 3D grid, under torchrun or in one process (a 1x1x1 grid)
        if args.partition not in (None, "range"):
            raise MggError("--partition applies to the row-partitioned backends; the grid cuts the graph by its grid")
        from .training.grid import train as train_grid

        res = train_grid(
            ds,
            cfg,
            args.grid,
            progress=not args.quiet,
            checkpoint=args.checkpoint,
            checkpoint_every=args.checkpoint_every,
            timeout_min=args.timeout,
        )
        if res["rank"] != 0:
            return
        inside = "yes" if res["y_inside_node"] else "no"
        print(f"{res['world']} ranks, backend grid, grid {res['grid']} (Y groups inside a node: {inside})")
    elif distributed:
        from .training.torchrun import train as train_distributed

        res = train_distributed(
            ds,
            cfg,
            args.backend,
            progress=not args.quiet,
            fetch=args.fetch,
            partition=args.partition,
            remote_reads=args.remote_reads,
            replication=args.replication,
            stage_rule=args.stage_rule,
            checkpoint=args.checkpoint,
            checkpoint_every=args.checkpoint_every,
            timeout_min=args.timeout,
        )
        if res["rank"] != 0:
            return
        c = f", replication {args.replication}" if args.replication else ""
        print(f"{res['world']} ranks, backend {args.backend}{c}, partition {res['partition']}")
    else:
        if args.partition not in (None, "range"):
            raise MggError(
                "--partition applies to distributed training (torchrun with 2 or more processes); one "
                "process owns every node"
            )
        saver = None
        if args.checkpoint is not None:
            from .training.checkpoint import Checkpoints, dataset_identity, identity

            saver = Checkpoints(
                args.checkpoint,
                args.checkpoint_every,
                identity(dataset_identity(ds), cfg, backend="one process", world=1),
            )
        res = train(ds, cfg, progress=not args.quiet, checkpoints=saver)
        from .nn.graph_input import order_decisions

        for line in order_decisions():
            print(line)
    for r in res["runs"]:
        if args.curve:
            for epoch, (loss, val, test) in enumerate(r.curve):
                print(f"seed {r.seed} epoch {epoch}: loss {loss:.6f}, val {val * 100:.2f}%, test {test * 100:.2f}%")
        print(
            f"seed {r.seed}: test {r.test_acc * 100:.1f}% (val {r.val_acc * 100:.1f}% at epoch {r.best_epoch}), "
            f"{r.epoch_ms:.1f} ms/epoch"
        )
        _print_tuning(r.tuning)
    print(
        f"{res['dataset']} {args.model}: test accuracy {res['mean'] * 100:.2f} ± {res['std'] * 100:.2f}% "
        f"over {len(res['runs'])} seeds"
    )


def _choose_strategy(args, ds, cfg, distributed: bool) -> None:
    """--backend auto: the strategy the one model ranks first (mgg.training.auto) becomes args'
    backend, replication and grid; rank 0 says which, and the runner-up, in one line."""
    if not distributed:
        args.backend = "halo"  # one process: nothing to choose
        return
    from .data import NodeDataset
    from .distributed.process import init_from_env
    from .training.auto import choose, cluster_of_job

    if not isinstance(ds, NodeDataset):
        raise MggError("--backend auto ranks the strategies on the whole graph; a prepared dataset names its backend")
    cluster = cluster_of_job(args.nvlink_gbps, args.network_gbps)
    init_from_env(cfg.device, "halo", args.timeout)
    strategy, said = choose(ds, cfg, cluster, args.partition)
    import torch.distributed as dist

    if dist.get_rank() == 0:
        print(said, flush=True)
    args.backend, args.replication = strategy.backend, strategy.replication if strategy.replication > 1 else None
    args.grid = strategy.grid or args.grid


def _print_tuning(summaries: list) -> None:
    """Each tuned layer's trajectory and chosen config (mgg train --autotune)."""
    from .runtime.report import chosen_line, trajectory_table

    for i, t in enumerate(summaries):
        if t["chosen"] is None:
            print(f"  layer {i + 1}: still tuning after {len(t['trajectory'])} iterations (more epochs finish it)")
            continue
        if t["trajectory"]:
            print("  " + trajectory_table(t["trajectory"]).replace("\n", "\n  "))
        print(f"  layer {i + 1} {chosen_line(t)}")


def cmd_tune(args):
    from .runtime.cli import run_tune

    run_tune(args)


def cmd_bench(args):
    """`python -m bench` of mgg's repository, in a child process: the harness is no part of the
    installed package, and mgg never imports it."""
    import importlib.util
    import os
    import subprocess
    import sys
    from pathlib import Path

    spec = importlib.util.find_spec("bench")
    here = Path(spec.origin).parent if spec is not None and spec.origin else None
    if here is None or not (here / "suites").is_dir() or not (here / "__main__.py").is_file():
        raise MggError(
            "the benchmark harness is the bench/ folder of mgg's repository: run `mgg bench` (or "
            "`python -m bench`) from a checkout"
        )
    path = os.pathsep.join(p for p in (str(here.parent), os.environ.get("PYTHONPATH")) if p)
    rc = subprocess.run([sys.executable, "-m", "bench", *args.rest], env=dict(os.environ, PYTHONPATH=path)).returncode
    if rc:
        raise SystemExit(rc)


DEVICE_HELP = (
    "cpu, cuda or cuda:N (default: the GPU where one is visible and mgg has CUDA kernels for it, else the CPU; "
    "the first line of output says which and why)"
)
GRAPH_HELP = (
    "a file (edge list, .mtx, .npz), a dataset directory or name under --data-dir (Planetoid name, "
    "reddit, ogbn-*), or a synthetic spec (rmat-reddit, rmat-products, rmat:N:E, sbm:N:BLOCKS:AVG_DEG:P_IN)"
)


def _add_source(p):
    """The options of every command that reads a graph by spec (see mgg.data.resolve)."""
    p.add_argument("--data-dir", default=None, help="directory holding the datasets (default: bundled Cora)")
    p.add_argument(
        "--relabel",
        action="store_true",
        help="edge lists: number the distinct node ids 0..N-1 in sorted order (for sparse ids)",
    )


def _add_config(p):
    from .plan import DIST_RANGE, PS_RANGE, WPB_RANGE, Config

    d = Config()
    p.add_argument(
        "--ps",
        type=int,
        default=d.ps,
        help=f"neighbor-partition size ({PS_RANGE[0]}-{PS_RANGE[1]}; 0 turns partitioning off)",
    )
    p.add_argument("--dist", type=int, default=d.dist, help=f"interleave distance ({DIST_RANGE[0]}-{DIST_RANGE[1]})")
    p.add_argument("--wpb", type=int, default=d.wpb, help=f"warps per block ({WPB_RANGE[0]}-{WPB_RANGE[1]})")


def _backends() -> tuple:
    from .distributed.graph import BACKENDS

    return (*BACKENDS, "grid", "auto")


def _partition_methods() -> list:
    from .partitioning import METHODS

    return list(METHODS)


def _orders() -> list:
    from .plan.config import ORDERS

    return list(ORDERS)


def _fetch_names() -> list:
    from .ops import FETCH

    return list(FETCH)


def _remote_read_modes() -> list:
    from .plan import REMOTE_READS
    from .runtime.remote_reads import AUTO

    return [*REMOTE_READS, AUTO]


def parser() -> argparse.ArgumentParser:
    from .nn.models import PROTOCOLS

    ap = argparse.ArgumentParser(prog="mgg", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser(
        "info",
        help="versions, GPUs, and what the extension was built with; with GRAPH, its "
        "degree statistics (and the real dataset's, for a synthetic stand-in)",
    )
    p.add_argument("graph", nargs="?", default=None, help=GRAPH_HELP)
    _add_source(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_info)

    p = sub.add_parser(
        "partition",
        help="which nodes each rank owns, and what it costs: per rank nodes, edges, "
        "local/remote edges, rows exchanged, imbalance; --method all compares",
    )
    p.add_argument("graph", help=GRAPH_HELP)
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument(
        "--method",
        choices=[*_partition_methods(), "all"],
        default="range",
        help="range: MGG Algorithm 1 on the graph's order; random: a seeded permutation; metis: METIS "
        "k-way, fewest remote edges; hypergraph: Mt-KaHyPar, fewest rows exchanged (metis and "
        "hypergraph: pip install mgg[partition]); metis+vb, hypergraph+vb: refined for the busiest "
        "sender (Graph-VB's objective: max send volume at nearly the same total); all: compare them",
    )
    p.add_argument("--seed", type=int, default=0, help="the seed of random, metis and hypergraph")
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="partition afresh (metis and hypergraph results are otherwise kept in "
        "$MGG_PARTITION_CACHE or ~/.cache/mgg/partitions)",
    )
    _add_source(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_partition)

    p = sub.add_parser(
        "prepare",
        help="partition a dataset once, onto disk, so that each rank of a run reads and holds only its part",
        description="Writes SOURCE (a dataset mgg train reads) as OUT: P parts of contiguous relabelled node "
        "ranges, plain .npy arrays and a manifest with every file's size and checksums. A run of any rank "
        "count that divides P reads it (torchrun ... -m mgg train --dataset OUT), each rank its own parts.",
    )
    p.add_argument("source", help="the dataset: " + GRAPH_HELP)
    p.add_argument("out", help="the directory to write (written under a temporary name, renamed when complete)")
    p.add_argument("--parts", type=int, required=True, help="P: runs of any rank count dividing P read it")
    p.add_argument(
        "--method",
        choices=_partition_methods(),
        default="range",
        help="range and random stream (memory: the chunk budget, whatever the edge count and feature width); "
        "metis and hypergraph hold the graph in memory (estimated first, refused in one line if it cannot fit)",
    )
    p.add_argument("--seed", type=int, default=0, help="the method's seed")
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="MiB of edges and feature rows in flight (default: 512, or a quarter of the free memory)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace OUT (only once the new one is complete)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_source(p)
    p.set_defaults(fn=cmd_prepare)

    p = sub.add_parser(
        "parts",
        help="the files of a prepared dataset that a machine's ranks read (for copying without a shared filesystem)",
        description="Prints, one per line relative to DIR, the manifest and the part files that ranks read in a "
        "run of --ranks ranks: those of machine --node (its --gpus-per-node consecutive ranks), or of --rank. "
        "E.g. mgg parts DIR --ranks 64 --node 3 --gpus-per-node 8 | rsync -a --files-from=- DIR/ host3:DIR/",
    )
    p.add_argument("dir", help="a prepared dataset (mgg prepare)")
    p.add_argument("--ranks", type=int, required=True, help="the run's rank count (it must divide the parts)")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--node", type=int, help="the machine (torchrun's --node-rank, with static rendezvous)")
    who.add_argument("--rank", type=int, help="one rank")
    p.add_argument("--gpus-per-node", type=int, default=1, help="ranks per machine (torchrun's --nproc-per-node)")
    p.set_defaults(fn=cmd_parts)

    p = sub.add_parser("train", help="full-graph node classification (Planetoid, PyG Reddit, OGB, .npz dataset)")
    p.add_argument(
        "--dataset",
        default="cora",
        help="a dataset name under --data-dir (Planetoid name, reddit, "
        "ogbn-arxiv ...) or a dataset directory or .npz file",
    )
    p.add_argument("--data-dir", default=None, help="directory holding the datasets (default: bundled Cora)")
    p.add_argument(
        "--model",
        choices=list(PROTOCOLS),
        default="gcn",
        help="; ".join(f"{k}: {v.source}" for k, v in PROTOCOLS.items()),
    )
    p.add_argument(
        "--hidden",
        type=int,
        default=None,
        help="hidden width (gat: per head); default: the model's ("
        + ", ".join(f"{k} {v.hidden}" for k, v in PROTOCOLS.items())
        + ")",
    )
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=None, help="default: the model's (200)")
    p.add_argument(
        "--lr",
        type=float,
        default=None,
        help="default: the model's (" + ", ".join(f"{k} {v.lr}" for k, v in PROTOCOLS.items()) + ")",
    )
    p.add_argument(
        "--weight-decay", type=float, default=None, help="default: the model's (5e-4; gcn: on the first layer only)"
    )
    p.add_argument(
        "--dropout",
        type=float,
        default=None,
        help="default: the model's (" + ", ".join(f"{k} {v.dropout}" for k, v in PROTOCOLS.items()) + ")",
    )
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--device", default=None, help=DEVICE_HELP)
    p.add_argument("--autotune", action="store_true", help="tune ps/dist/wpb online while training")
    p.add_argument(
        "--backend",
        choices=_backends(),
        default="halo",
        help="peer access under torchrun: halo (all-to-all over torch.distributed), nvshmem (MGG: "
        "symmetric memory, the kernel reads peers; needs --device cuda), allgather (CAGNET 1D: "
        "every rank gathers all rows each layer) or node-halo (across machines: each remote row "
        "over the network once per machine, then inside the machine; machines of LOCAL_WORLD_SIZE ranks), "
        "node-nvshmem (node-halo's network stage, then MGG's fused kernel over each machine's NVSHMEM; "
        "needs --device cuda), grid (Plexus's 3D grid: adjacency, features and weights split over "
        "GXxGYxGZ ranks; gcn, sage), sa-1.5d or cagnet-1.5d (P/c blocks replicated on c ranks, --replication c: "
        "the sparsity-aware rows, or CAGNET's whole blocks, down each process column; gcn, sage, gin)",
    )
    p.add_argument(
        "--replication",
        type=int,
        default=None,
        help="sa-1.5d and cagnet-1.5d: c, the replicas of each of the P/c blocks (c divides the ranks; default 1)",
    )
    p.add_argument(
        "--nvlink-gbps",
        type=float,
        default=None,
        help="--backend auto: a GPU's NVLink rate (GB/s one way; default 450)",
    )
    p.add_argument(
        "--network-gbps",
        type=float,
        default=None,
        help="--backend auto: a machine's network rate (GB/s one way; needed when the job spans machines)",
    )
    p.add_argument(
        "--stage-rule",
        choices=["balanced", "cagnet"],
        default="balanced",
        help="sa-1.5d and cagnet-1.5d: how the process columns share the blocks (cagnet: CAGNET's code's rule)",
    )
    p.add_argument(
        "--grid",
        default="auto",
        help="with --backend grid: GXxGYxGZ (e.g. 4x2x1; Y innermost, inside a node), or auto: the first of "
        "mgg.distributed.grid.model's ranking (python -m bench grid)",
    )
    p.add_argument(
        "--fetch",
        choices=[f for f in _fetch_names() if f != "uva"],
        default="get-warp",
        help="how the nvshmem and node-nvshmem backends read peers' rows: NVSHMEM get at warp/thread/block "
        "scope, or direct loads through nvshmem_ptr",
    )
    p.add_argument(
        "--remote-reads",
        choices=_remote_read_modes(),
        default="per-edge",
        help="how often the nvshmem and node-nvshmem backends read a remote row per aggregation: once per edge "
        "that names it (MGG), once (gathered into a local table while local edges are aggregated), or auto "
        "(each layer measured at its first step in the modes the cost model keeps, the faster kept)",
    )
    p.add_argument(
        "--partition",
        choices=_partition_methods(),
        default=None,
        help="under torchrun, which nodes each rank owns: range (MGG Algorithm 1), random, metis or "
        "hypergraph (see mgg partition); with node-halo and node-nvshmem, how the graph is split between "
        "machines. Default: range, and for those two the installed method that cuts the least inter-node volume",
    )
    p.add_argument("--deterministic", action="store_true")
    p.add_argument(
        "--curve", action="store_true", help="print every epoch's loss (over all training nodes) and accuracies"
    )
    p.add_argument(
        "--checkpoint",
        default=None,
        metavar="DIR",
        help="save checkpoints in DIR (a directory every rank sees) and resume from the newest there: a "
        "restarted run (torchrun --max-restarts) goes on where it was",
    )
    p.add_argument("--checkpoint-every", type=int, default=10, metavar="N", help="epochs between checkpoints (10)")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="MIN",
        help="under torchrun, minutes a rank waits for the others before the job ends naming the ranks that "
        "did not arrive (default 10)",
    )
    p.add_argument("--quiet", action="store_true")
    _add_config(p)
    p.add_argument(
        "--order",
        choices=[*_orders(), "auto"],
        default="auto",
        help="the node order one process plans the graph in (tensors stay in the dataset's order): auto measures "
        "the first forward and keeps an order only where it is faster and pays back its cost (mgg.runtime.ordering); "
        "rcm, degree, metis, random, or user (none). Distributed training keeps its partition's order",
    )
    p.set_defaults(fn=cmd_train)

    p = sub.add_parser("tune", help="search ps, dist, wpb for a graph, feature width and number of ranks")
    p.add_argument("--dataset", required=True, help=GRAPH_HELP)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    p.add_argument("--device", default=None, help=DEVICE_HELP)
    p.add_argument(
        "--ranks",
        type=int,
        default=1,
        help="tune the plan of P ranks: all of them in this process, one after another (P PEs "
        "time-sliced on one device); the step time is theirs together",
    )
    p.add_argument(
        "--via",
        choices=["peers", "halo"],
        default="peers",
        help="with --ranks > 1: each rank reads peers' rows in place (aggregate_peers, direct loads) "
        "or gathers a halo buffer first",
    )
    p.add_argument(
        "--no-model",
        action="store_true",
        help="MGG's plain search from (1, 1, 1), without the cost model's seed and pruning (eq. 2-3)",
    )
    p.add_argument("--iterations", type=int, default=15)
    p.add_argument("--repeat", type=int, default=5, help="timed runs per measured config")
    p.add_argument("--exhaustive", action="store_true", help="also measure the whole grid, write CSV and heat map")
    p.add_argument("--out", default=".", help="directory for --exhaustive outputs (default: the current one)")
    p.add_argument("--cache", default=None, help="config cache file (default: ~/.cache/mgg/tuned.json)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(fn=cmd_tune)

    p = sub.add_parser("bench", help="the microbenchmark harness (same as python -m bench)", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(fn=cmd_bench)
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "data_dir", "unset") is None:
        from .data import bundled_planetoid_dir

        args.data_dir = bundled_planetoid_dir()
    try:
        args.fn(args)
    except (MggError, FileNotFoundError) as e:
        sys.stderr.write(f"mgg {args.cmd}: error: {e}\n")  # one write: ranks' lines never interleave
        sys.stderr.flush()
        return 2
    return 0


def run() -> None:
    """The `mgg` program (console script and `python -m mgg`): main(), then the exit. A command
    that ran as a torchrun rank (torch.distributed is initialised) ends its process through
    mgg.distributed.process.exit_rank, since gloo's teardown may abort a finished rank; main()
    itself returns, for callers in a process of their own."""
    code = main()
    torch_dist = sys.modules.get("torch.distributed")
    if torch_dist is not None and torch_dist.is_available() and torch_dist.is_initialized():
        from .distributed.process import exit_rank

        exit_rank(code, meet=code == 0)
    sys.exit(code)


if __name__ == "__main__":
    run()
