"""A process's resident memory on Linux, for the benchmarks that report peak host memory: the
current RSS, the high-water RSS (VmHWM) and its reset through /proc/self/clear_refs, so a peak
can be taken over one step rather than the process's whole life."""

import resource


def rss_bytes() -> int:
    """The resident set size now."""
    return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()


def peak_rss_bytes() -> int:
    """The high-water RSS since the process started or since reset_peak_rss() (VmHWM)."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss() -> bool:
    """Sets VmHWM to the current RSS; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True
