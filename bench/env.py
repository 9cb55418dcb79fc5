"""What every row records about the run: device, versions, date, and the device's copy
bandwidth (the yardstick for achieved gather bandwidth)."""

from __future__ import annotations

import platform
from datetime import datetime, timezone

import torch

from mgg.runtime.timing import measure


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def environment(device: torch.device) -> dict:
    return dict(
        device=device_name(device),
        torch=torch.__version__,
        cuda=torch.version.cuda or "none",
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
    )


def copy_bandwidth_gbps(device: torch.device, mb: int = 256) -> float:
    """Device-to-device copy bandwidth: bytes read + written per second by a large copy."""
    n = (mb << 20) // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    t = measure(lambda: dst.copy_(src), device, warmup=3, reps=20)
    return 2 * src.numel() * 4 / (t.median_ms * 1e-3) / 1e9
