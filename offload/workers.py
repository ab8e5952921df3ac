"""A small process-wide thread pool for the parts of an offload that release the GIL.

Hashing a large result (hashlib) and writing its chunks (sqlite3, psycopg, DuckDB) run in C without
the GIL, so on a second core they overlap the chunking and the preview, which are Python. Nothing
submitted here waits for another task of this pool (a write waits only for the caller's thread: its
chunks and what the content is), so the pool cannot deadlock itself as long as nothing is submitted
from one of its own threads; its threads are idle otherwise and joined at interpreter exit.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()
WORKERS = 4


def submit(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
    global _pool
    if _pool is None:
        with _lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="offload")
    return _pool.submit(fn, *args, **kwargs)
