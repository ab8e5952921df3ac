"""A small process-wide thread pool for the parts of an offload that release the GIL.

Hashing a large result (hashlib) and writing its chunks (sqlite3, psycopg, DuckDB) run in C without
the GIL, so on a second core they overlap the chunking and the preview, which are Python. Nothing
submitted here waits for another task of this pool (a write waits only for the caller's thread: its
chunks and what the content is), so the pool cannot deadlock itself as long as nothing is submitted
from one of its own threads; its threads are idle otherwise and joined at interpreter exit.

A forked child (multiprocessing forks by default on Linux) has none of the parent's threads: it starts
a pool of its own, and a task the parent submitted never ends there, so waiting for one fails at once.
"""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from .errors import StoreError

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()
WORKERS = 4

# A worker that leaves the GIL for C (a SQLite step, a hash, a numpy pass) needs it back to go on, and
# the caller's thread, running Python meanwhile (the preview), hands it over only when asked to, once a
# switch interval has passed: 5 ms by default, which a write of a few statements waits for each time.
# So while a big result is written ahead (`submit_quick`, from writes.QUICK_FROM, which gives the
# measurements), the interval is QUICK_SWITCH. A JSON item index of 1 MB took 5.8 ms alone, 42 ms
# beside a thread running Python, and 13 ms beside it at this interval.
QUICK_SWITCH = 0.0002
_switching = 0  # writes ahead under way
_interval: float | None = None  # the interval to give back when the last one ends, if it was lowered
_lowered = 0.0  # the lowered interval as the interpreter reads it back (it keeps microseconds)
_switch_lock = threading.Lock()


class Task(Future):
    """A future of this pool that knows the process it was submitted in: in a process forked since, no
    thread will ever run it, so `result` and `exception` fail at once instead of waiting for ever."""

    def __init__(self) -> None:
        super().__init__()
        self.pid = os.getpid()

    def result(self, timeout: float | None = None) -> Any:
        self._not_forked()
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._not_forked()
        return super().exception(timeout)

    def _not_forked(self) -> None:
        if self.pid != os.getpid() and not self.done():
            raise StoreError("this process was forked while offload's worker thread was writing (or freeing) a "
                             "result in the parent: that thread is not in this process, so the task never ends here")


def submit(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Task:
    global _pool
    if _pool is None:
        with _lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="offload")
    task = Task()

    def run() -> None:
        if not task.set_running_or_notify_cancel():
            return
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:  # held by the future, as ThreadPoolExecutor's own do
            task.set_exception(exc)
        else:
            task.set_result(result)

    _pool.submit(run)
    return task


def _after_fork_in_child() -> None:
    """A child has none of the pool's threads (a pool whose threads are gone queues its tasks for ever: a
    child's first large put hung), and a lock a thread of the parent held would never be released."""
    global _pool, _lock, _switch_lock, _switching, _interval
    _pool, _lock, _switch_lock = None, threading.Lock(), threading.Lock()
    if _switching and _interval is not None and sys.getswitchinterval() == _lowered:
        sys.setswitchinterval(_interval)  # the tasks that lowered it never end here
    _switching, _interval = 0, None


def submit_quick(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
    """`submit`, with the switch interval at QUICK_SWITCH (if it was longer) until the task ends.

    Concurrent tasks share one lowering: the first sets it, the last gives the interval back, unless
    someone else set another one meanwhile (theirs then stands). The interval is the process's: while
    it is lowered, threads that contend for the GIL take turns more often (two threads running Python
    loops here took 210 ms instead of 194); a thread alone is not affected. QUICK_SWITCH set to 1 (a
    second) turns the lowering off."""
    global _switching, _interval, _lowered
    with _switch_lock:
        if _switching == 0:
            before = sys.getswitchinterval()
            _interval = None
            if before > QUICK_SWITCH:
                sys.setswitchinterval(QUICK_SWITCH)
                _interval, _lowered = before, sys.getswitchinterval()
        _switching += 1

    def task() -> Any:
        try:
            return fn(*args, **kwargs)
        finally:  # before the future is done: whoever waits for it finds the interval given back
            _switch_back()

    try:
        return submit(task)
    except BaseException:
        _switch_back()
        raise


def _switch_back() -> None:
    global _switching
    with _switch_lock:
        _switching -= 1
        if _switching == 0 and _interval is not None and sys.getswitchinterval() == _lowered:
            sys.setswitchinterval(_interval)


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_after_fork_in_child)
