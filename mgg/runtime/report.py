"""The text of a tuning run: its trajectory (one measured config per iteration, with the step
time and the best so far) and the chosen config, as `mgg tune` and `mgg train --autotune` print
them."""

from __future__ import annotations

import math

from .config_cache import parse_key


def trajectory_rows(trajectory: list) -> list[dict]:
    """One row per iteration: iteration, ps, dist, wpb, latency_ms (the step time), best_ms.

    Args:
        trajectory: [(config, step ms)] in the order measured.

    Returns:
        The rows.
    """
    rows, best = [], math.inf
    for i, (c, ms) in enumerate(trajectory):
        best = min(best, ms)
        rows.append(
            dict(iteration=i + 1, ps=c.ps, dist=c.dist, wpb=c.wpb, latency_ms=round(ms, 4), best_ms=round(best, 4))
        )
    return rows


def trajectory_table(trajectory: list) -> str:
    """The trajectory as a fixed-width table."""
    lines = [f"{'iter':>4} {'ps':>3} {'dist':>4} {'wpb':>3} {'latency_ms':>11} {'best_ms':>9}"]
    lines += [
        f"{r['iteration']:4d} {r['ps']:3d} {r['dist']:4d} {r['wpb']:3d} {r['latency_ms']:11.4f} {r['best_ms']:9.4f}"
        for r in trajectory_rows(trajectory)
    ]
    return "\n".join(lines)


def where(key: str) -> str:
    """What a cache key tunes, in words: D, dtype, ranks, backend, fetch, device."""
    k = parse_key(key)
    fetch = "" if k["fetch"] == "none" else f" fetch {k['fetch']}"
    return f"D={k['dim']} {k['dtype']}, {k['ranks']} rank(s), {k['backend']}{fetch} on {k['device_name']}"


def chosen_line(summary: dict) -> str:
    """One line: the chosen config, its step time and its gain over the first config measured
    (or that it came from the cache).

    Args:
        summary: OnlineTuner.summary().

    Returns:
        The line.
    """
    c = summary["chosen"]
    head = f"chosen: ps={c.ps} dist={c.dist} wpb={c.wpb}"
    if summary["from_cache"]:
        return f"{head} (from the config cache: started tuned) for {where(summary['key'])}"
    gain = (1 - summary["chosen_ms"] / summary["start_ms"]) * 100
    pruned = f"; the cost model pruned {summary['pruned']} configs" if summary.get("pruned") else ""
    return (
        f"{head}  {summary['chosen_ms']:.4f} ms ({gain:.1f}% below the start config) after "
        f"{len(summary['trajectory'])} iterations{pruned}, for {where(summary['key'])}"
    )
