"""Process pools whose workers never outlive the process that made them.

A pool worker blocked on its task queue, or busy with a long task, does not notice that its parent was killed
outright (SIGKILL, the OOM killer): the pipes it reads stay open because it holds their write ends itself. Workers
of :func:`process_pool` ask the kernel to kill them when their parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``) and
also watch their parent pid once a second (other systems, and a parent that died before the request). Once they
are gone, multiprocessing's resource tracker reads the end of its pipe and exits as well.

Workers are spawned (a fresh interpreter), never forked: forking a process that runs torch's or BLAS's thread
pools can deadlock the child.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

#: ``prctl`` option: the signal a process receives when its parent dies (``<linux/prctl.h>``).
PR_SET_PDEATHSIG = 1
#: Seconds between two checks of the parent pid by a worker's watchdog thread.
WATCH_SECONDS = 1.0


def die_with_parent(parent: int) -> None:
    """Pool initializer: this process is killed when ``parent`` (the pid that started it) dies."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no usable libc: the watchdog alone
            pass
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), name="parent-watch", daemon=True).start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_SECONDS)
    os._exit(1)


def process_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` spawned processes that die with this one."""
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=get_context("spawn"), initializer=die_with_parent, initargs=(os.getpid(),)
    )
