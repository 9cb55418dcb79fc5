"""Timing of a callable: CUDA events on a GPU, perf_counter on the CPU; warm-up, repetitions,
median with 10th/90th percentiles, optional L2 flush between repetitions."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch


@dataclass
class Timing:
    median_ms: float
    p10_ms: float
    p90_ms: float
    samples: int

    @staticmethod
    def of(samples_ms) -> "Timing":
        a = np.asarray(samples_ms, dtype=np.float64)
        return Timing(float(np.median(a)), float(np.percentile(a, 10)), float(np.percentile(a, 90)), a.size)


_L2_FLUSH: dict = {}


def _flush_l2(device: torch.device):
    buf = _L2_FLUSH.get(device)
    if buf is None:
        size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20)
        buf = _L2_FLUSH[device] = torch.empty(2 * size // 4, dtype=torch.int32, device=device)
    buf.zero_()


def measure(fn: Callable[[], object], device, warmup: int = 3, reps: int = 20, flush_l2: bool = False) -> Timing:
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    samples = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(reps):
            if flush_l2:
                _flush_l2(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return Timing.of(samples)


def time_once(fn: Callable[[], object], device) -> tuple[object, float]:
    """Runs fn once and returns (its result, milliseconds): the tuner's per-iteration probe."""
    device = torch.device(device)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        end.synchronize()
        return out, start.elapsed_time(end)
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1e3
