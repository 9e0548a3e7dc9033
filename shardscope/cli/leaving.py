"""How the ``shardscope`` process ends once its command is done: at once, without tearing JAX's
CPU client down.

JAX's own exit handler (``jax._src.api.clean_up``, registered with :mod:`atexit`) clears its
backends, and XLA's CPU client then stops and joins each of its threads: one per simulated device
(``PjRtCpuClient``'s ``XLAPjRtCpuClient`` pool is ``max(cores, devices)`` threads, its
``XLAEigen`` pool up to 256 more; ``xla/pjrt/cpu/cpu_client.cc``, ``GetPjRtCpuClient``). At
1,024 devices that is ~1,280 threads woken and joined after the report is written: 0.45 s here
(2 cores), and on the 13-core TPU VM host (a gVisor sandbox) ~0.4 s of wall and ~2.5 s of CPU,
measured as a process that started 1,024 devices and left normally against one that left with
``os._exit``. Nothing the command printed or wrote depends on it, so the process leaves without it.

Every other exit handler still runs (a profile's or coverage's, ``logging``'s, the temporary
folders' finalizers), what Python and C buffered is flushed, and the status is the command's. A
process in ``jax.distributed`` keeps JAX's handler: it also shuts the coordination service down.
Only the process's own command line leaves this way (:func:`shardscope.cli.main` with no
arguments: the ``shardscope`` script, ``python -m shardscope``); ``main(argv)`` returns, for a
caller that goes on (the tests).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading
from typing import NoReturn

from shardscope.distributed.interrupts import flush_streams


def leave_process(status: int) -> NoReturn:
    """End the process with ``status``: as Python's own exit, the threads that are not daemons
    are waited for (a user's file that writes in a thread of its own) and the exit handlers but
    JAX's backend teardown run; the streams are flushed, then ``os._exit``."""
    _skip_jax_teardown()
    flush_streams()
    shutdown = getattr(threading, "_shutdown", None)  # what Python's exit runs first: joins non-daemon threads
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()  # the handlers Python's own exit would run, JAX's teardown no longer among them
    flush_streams()
    try:  # what C code buffered on stdout (XLA, libtpu): os._exit does not flush it
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass
    os._exit(status)


def _skip_jax_teardown() -> None:
    """Unregister JAX's exit handler, unless JAX is not loaded or a distributed run needs it."""
    api = sys.modules.get("jax._src.api")
    clean_up = getattr(api, "clean_up", None)
    if clean_up is None:
        return
    distributed = sys.modules.get("jax._src.distributed")
    state = getattr(distributed, "global_state", None)
    if getattr(state, "client", None) is not None or getattr(state, "service", None) is not None:
        return  # jax.distributed started: its shutdown stays
    atexit.unregister(clean_up)

