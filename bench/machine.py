"""What a benchmark ran on: printed with every set of figures."""

from __future__ import annotations

import os
import platform
import sys
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
