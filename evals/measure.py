"""What a benchmark reports next to its timings: the machine (CPU model, cores, the vector extensions
torch's kernels use) and the peak memory of a process tree."""

from __future__ import annotations

import os
import platform
import threading
import time
from pathlib import Path

import psutil

VECTOR_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def machine() -> str:
    """The CPU model, the cores and the vector flags, e.g. "Xeon ..., 2 cores, avx2 avx512f" (/proc/cpuinfo)."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    fields = dict(tuple(s.strip() for s in line.split(":", 1)) for line in lines if ":" in line)
    flags = [f for f in VECTOR_FLAGS if f in fields.get("flags", "").split()]
    model = fields.get("model name") or platform.processor() or platform.machine()
    return f"{model}, {os.cpu_count()} cores, {' '.join(flags) or 'no AVX2'}"


class PeakRSS:
    """Samples the memory of this process (or of the process `pid`) and its children every `interval`
    seconds: the sum of their PSS (proportional set size: shared pages such as torch's libraries are
    split between the processes that map them, so the sum is the tree's real footprint; a sum of RSS
    counts them once per process)."""

    def __init__(self, interval: float = 0.2, pid: int | None = None) -> None:
        self.interval, self.pid, self.peak, self._stop = interval, pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process(self.pid)
        while not self._stop.is_set():
            total = 0
            try:
                tree = [me, *me.children(recursive=True)]
            except psutil.Error:  # the process has exited
                tree = []
            for p in tree:
                try:
                    total += p.memory_full_info().pss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            time.sleep(self.interval)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
