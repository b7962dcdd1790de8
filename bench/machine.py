"""What a benchmark ran on (printed with every set of figures), and the CPU a load took."""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path


def describe() -> str:
    cpu = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = ""
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        kib = int(meminfo.read_text().split()[1])
        memory = f", {kib / 2**20:.0f} GiB"
    return (
        f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} cores{memory}; "
        f"Python {sys.version.split()[0]}"
    )


@dataclass(frozen=True)
class CpuUse:
    """Cores busy on average over a load: this process (the client), the server (gunicorn's master and
    workers, recycled ones included through the master's reaped-children times, and PostgreSQL), and the
    share of the machine that other work took meanwhile (figures taken under such load are not comparable)."""

    client: float
    server: float
    elsewhere: float


class CpuMeter:
    """CPU time from /proc, from construction until `stop()` (Linux only: None elsewhere)."""

    def __init__(self, master: int):
        self.master = master
        self.start = self._sample()

    def stop(self) -> CpuUse | None:
        end = self._sample()
        if self.start is None or end is None:
            return None
        (busy0, client0, server0, t0), (busy1, client1, server1, t1) = self.start, end
        tick_seconds = os.sysconf("SC_CLK_TCK") * (t1 - t0)
        client, server = (client1 - client0) / tick_seconds, (server1 - server0) / tick_seconds
        elsewhere = (busy1 - busy0) / tick_seconds - client - server
        return CpuUse(client, server, max(0.0, elsewhere) / (os.cpu_count() or 1))

    def _sample(self) -> tuple[int, int, int, float] | None:
        try:
            busy = sum(int(v) for i, v in enumerate(Path("/proc/stat").read_text().split()[1:9]) if i != 3)
        except OSError:
            return None
        processes: dict[int, tuple[int, str, int]] = {}  # pid: (ppid, name, utime+stime+cutime+cstime)
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                text_ = stat.read_text()
                name = text_[text_.index("(") + 1 : text_.rindex(")")]
                fields = text_[text_.rindex(")") + 2 :].split()
                processes[int(stat.parent.name)] = (int(fields[1]), name, sum(map(int, fields[11:15])))
        server = {self.master}
        for _ in range(3):  # the master's children, and theirs
            server |= {pid for pid, (ppid, _, _) in processes.items() if ppid in server}
        server |= {pid for pid, (_, name, _) in processes.items() if name == "postgres"}
        client = processes.get(os.getpid(), (0, "", 0))[2]
        return busy, client, sum(processes[pid][2] for pid in server if pid in processes), time.perf_counter()
