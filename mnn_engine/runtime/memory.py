"""The process's memory: how much the device has, how much this process
holds, and giving freed memory back to the system after a model unloads.

After ``Llm.close`` MNN has freed the model's buffers, but the C allocator
keeps freed pages in its arenas for reuse: RSS stays near its loaded level
until something else needs them. On a phone that memory is what the next
model (or another app) needs, so after an unload the allocator is asked to
return what it can: glibc's ``malloc_trim(0)``, Android bionic's
``mallopt(M_PURGE_ALL)`` (``M_PURGE`` before API 34). Mapped weights
(``use_mmap``) are unmapped by MNN itself and stay as reclaimable page cache.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import resource
import sys

#: bionic's mallopt() parameters (bionic/libc/include/malloc.h)
M_PURGE = -101
M_PURGE_ALL = -104


#: buffers this large are given back as soon as they are freed (``trim_allocator``): an image's pixels. glibc
#: keeps them in the freeing thread's arena otherwise (a 6 MP image left 65 MiB in a server's arenas, 114 MiB
#: once both text workers had decoded one), and the trim takes about a millisecond
TRIM_AFTER_BYTES = 6 * 2**20


def total_memory_bytes() -> int:
    """The device's RAM (0 when the system does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return 0


def rss_bytes() -> int:
    """This process's resident memory now (the peak where /proc is missing)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak * (1 if sys.platform == "darwin" else 1024)


def give_back_memory() -> None:
    """Collect Python's garbage and ask the C allocator to return freed pages
    to the system (best effort: nothing happens where neither call exists)."""
    gc.collect()
    trim_allocator()


def trim_allocator() -> None:
    """Ask the C allocator to return its freed pages to the system (best effort)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None)
        if hasattr(libc, "malloc_trim"):  # glibc
            libc.malloc_trim(0)
        elif hasattr(libc, "mallopt") and libc.mallopt(M_PURGE_ALL, 0) != 1:  # bionic: 0 for an unknown option
            libc.mallopt(M_PURGE, 0)
