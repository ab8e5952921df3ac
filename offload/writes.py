"""The write of one result's bytes, beside the caller that builds its reference.

A large result is hashed, then written, on a worker thread while the caller chunks it and builds the
reference (hashlib and the database work without the GIL); a small one is written with its artifact
row in one transaction. Either way the artifact becomes visible whole, or not at all.
"""

from __future__ import annotations

import hashlib
import logging
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Sequence

from . import workers
from .content import Detected
from .content.lines import nul_separated
from .errors import StoreError
from .store.chunking import ItemIndex, json_item_index, ndjson_item_index, nul_item_index

if TYPE_CHECKING:
    from .offloader import Offloader

log = logging.getLogger("offload")

# Bytes from which a result is hashed, then written, on a worker thread while the caller chunks it and
# builds its reference; below, the caller hashes it and writes it with its artifact row in one
# transaction. hashlib and SQLite's steps run without the GIL, so the worker's hash and write overlap
# the caller's Python; but every step between them waits for the GIL (the threads take turns every 5 ms)
# and a second transaction adds its own commit, so for a small result the handover costs more than it
# saves. Interleaved puts on fresh stores after a file write and a collection, as the benchmark puts
# them, medians of 30-50 rounds, a 4 MiB threshold against this one (and again, against itself): 1 MB
# of grep output 11.6 -> 10.2 ms (11.7), 2 MB of log 14.1 -> 11.1 ms (14.3), 2 MB of grep output
# 13.7 -> 12.8 ms. The caller's own stages take longer meanwhile (the token estimate 2.2 -> 4 ms of a
# 1 MB put: the worker takes the GIL between its steps), less than the write they overlap.
ASIDE = 512 << 10
# Bytes from which the worker writes with the switch interval lowered (`workers.submit_quick`): the
# worker's write is then the longer of the two threads, and its every return from C waited up to 5 ms
# for the caller's Python. Below, the caller's preview is the longer and the worker interrupting it
# more often costs more than the write gains. Interleaved puts on fresh stores, medians, lowered vs
# not: grep output 1 MB 6.6 -> 6.5 ms, 2 MB 10.7 -> 9.7, 3 MB 13.9 -> 12.3, 10 MB 29.7 -> 24.9, 100 MB
# 234 -> 185; log 10 MB 23.8 -> 21.7; JSON 1 MB 27.4 -> 28.9 (two runs), 2 MB 43.0 -> 45.7, 3 MB 64.4
# -> 61.2, 10 MB 226 -> 204 (the A/A control: 0.1-0.9 ms apart at 1-10 MB of text, 18 ms at 100 MB,
# 14 ms at 10 MB of JSON).
QUICK_FROM = 2 << 20


class PendingWrite:
    """The store write of one result's bytes, on a worker thread while the caller builds its reference
    (from ASIDE; a smaller result is hashed by the caller and written whole, row and bytes in one
    transaction, by `finish`).

    hashlib and the database work without the GIL, so this overlaps the chunking and the preview, which
    are Python. The thread hashes the bytes (as long as a file write of them: the caller does not wait
    for it before it needs the reference's sha256), writes the chunks the caller has cut, takes what the
    content is once the caller has detected it (for the JSON item index, built on this thread too) and
    commits the content alone (`Store.put_content`); the caller then adds the artifact row in a short
    transaction of its own (`finish`). `abandon` makes a write still waiting give up, and removes
    content already written, so nothing is left of a reference that could not be built.
    """

    def __init__(self, offloader: Offloader, data: bytes, *,
                 companions: Sequence[tuple[dict[str, Any], bytes, str]] = ()):
        self.offloader, self.data = offloader, data
        # artifacts stored just before the result's row (its stderr, see `finish`); making room keeps them
        self.companions = list(companions)
        self.chunks: Future = Future()  # the caller's `chunk_bytes(data)`
        self.detected: Future = Future()
        self._sha256: Future = workers.Task()  # set by the worker: waiting fails at once in a forked child
        self.done: Future | None = None
        if len(data) >= ASIDE:
            submit = workers.submit_quick if len(data) >= QUICK_FROM else workers.submit
            self.done = submit(self._hash_then_write)
        else:
            self._sha256.set_result(sha256_hex(data))

    def _hash_then_write(self) -> None:
        try:
            sha256 = sha256_hex(self.data)
        except BaseException as exc:
            self._sha256.set_exception(exc)
            raise
        self._sha256.set_result(sha256)
        self.offloader.store.put_content(self.data, sha256, make_room=[], item_index=self.index,
                                         chunks=self.chunks.result())

    def sha256(self) -> str:
        return self._sha256.result()

    def index(self) -> ItemIndex | None:
        return item_index(self.detected.result(), self.data)

    def finish(self, row: dict[str, Any]) -> None:
        """Wait for the content, then store the companions, each in a transaction of its own, and the
        artifact row (and the content again, if gc took it, or all of it, for a small result).

        The companions come now, once the reference is built, not before it: stored first, a gc
        making room meanwhile could evict the stderr the reference then named. Stored with the row,
        in one transaction, the quota checks of two contents deadlocked writers near the quota on
        PostgreSQL (22 of 72 shell puts in 4 processes lock-timed out)."""
        if self.done is not None:
            self.done.result()
        store, stored = self.offloader.store, []
        try:
            for given, data, sha256 in self.companions:
                store.put(given, data, sha256, make_room=stored)
                stored.append(given["id"])
            store.put(row, self.data, self.sha256(), make_room=stored, item_index=self.index,
                      chunks=self.chunks.result())
        except BaseException:
            for artifact_id in stored:  # nothing may point at them now
                try:
                    store.delete(artifact_id, row["namespace"])
                except Exception:  # noqa: BLE001 - best effort; gc collects it when it expires
                    log.warning("could not remove the stderr artifact %s of an unstored result", artifact_id)
            if self.done is not None:
                self._discard()  # the content written ahead would belong to no artifact
            raise

    def abandon(self) -> None:
        for waited in (self.chunks, self.detected):
            if not waited.done():
                waited.set_exception(StoreError("the reference could not be built; nothing was stored"))
        if self.done is None:
            return
        try:
            self.done.result()
        except Exception:  # noqa: BLE001 - nothing was written
            return
        self._discard()

    def _discard(self) -> None:
        try:
            self.offloader.store.discard_content(self.sha256())
        except Exception as exc:  # noqa: BLE001 - gc removes what is left
            log.debug("content of an unstored result left to gc: %s", exc)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def item_index(detected: Detected, data: bytes) -> ItemIndex | None:
    """The byte ranges of the main array's items (JSON), of the rows (NDJSON) or of the entries of
    NUL-separated text (`find -print0`), for item slices.

    The index only makes item pages cheap; without it they are cut from the parsed document. So a
    failure here is logged and the result is stored without one, rather than not stored at all.
    """
    try:
        if detected.kind == "json" and detected.doc is not None:
            return json_item_index(data)
        if detected.kind == "ndjson":
            return ndjson_item_index(data)
        if detected.kind == "text" and b"\x00" in data and nul_separated(data):
            return nul_item_index(data)
    except Exception:  # see above: stored without an index
        log.warning("the item index of a %s result failed; stored without one", detected.kind, exc_info=True)
    return None
