"""A one-line description of the machine a benchmark ran on (CPU model, cores, memory, GPU if any)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as stream:
            for line in stream:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        import psutil

        memory = f", {psutil.virtual_memory().total / 2**30:.0f} GiB RAM"
    except ImportError:
        memory = ""
    gpu = ""
    if shutil.which("nvidia-smi"):
        try:
            names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                   text=True, timeout=10).stdout.strip().splitlines()
            gpu = f", GPU: {', '.join(names)}" if names else ""
        except (OSError, subprocess.SubprocessError):
            gpu = ""
    return f"{cpu}, {cores} cores{memory}{gpu}, {platform.system()} {platform.release()}, Python {platform.python_version()}"
