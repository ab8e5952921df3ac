"""Ingest throughput: `Offloader.put` end to end and the raw `Store.put`, per backend, next to a file write.

    python benchmarks/ingest.py [--quick] [--backends sqlite,duckdb,postgresql] [--sizes 1,10,100]
                                [--kinds text/grep,text/log,json] [--all-kinds] [--no-profile]

Data (made once per size, realistic, from real stdlib files):
  text/grep  `grep -rn` output over the stdlib (tool "grep")
  text/log   an application log quoting stdlib source lines (tool "bash"; SQLite only unless --all-kinds:
             it differs from text/grep in the preview only, which does not depend on the backend)
  json       an array of API-like objects: id, low-cardinality status, names, nested owner, tags (tool "api")

For every size and backend, rounds alternate (so noise hits all alike): the same bytes written to a file
with fsync; for JSON, one orjson parse with gc disabled; `Offloader.put(data, tool=...)` on a fresh
store (detect + preview + hash + chunking + store); the raw `Store.put` of the same bytes on another
fresh store; and the exact facts every reference states (sha256, characters, lines), each by the
fastest pass there is here. Medians of the rounds (the file write, the noisiest and cheapest figure, 3
times a round). Store opening and migration are outside the timings. A second table splits Offloader.put into its stages
by timing the functions it calls: on the caller's thread chunking (with the character, line and UTF-8
counts), detect, the token estimate, the preview and Store.put (the artifact row, and below 512 KiB the
content with it); from 512 KiB (writes.ASIDE) the content is hashed, then written ahead, on a worker
thread while it is chunked and its reference built (Store.put_content, the write alone). The JSON item
index is built inside whichever write stores the content. "waiting" is the rest of the put: the hash
(by the caller below 512 KiB), rendering the reference, and waiting for the worker's hash and write
(from 512 KiB).
Each timed put follows one small put on the same store, outside the timing: a running agent's store
has compiled its statements by its second call (that costs ~5 ms once).

Goals (issue), on SQLite: text within 2x of the file write (over 5x is a defect); JSON within 2x of
file write + one orjson parse with gc disabled. One more put per kind and size on SQLite runs under a
profiler (pyinstrument if installed, else cProfile) and names the offload functions that cost most.
--quick: 1 and 10 MB, fewer rounds (about 2 minutes); the full run takes longer (about 8 minutes on a
loaded 2-core machine), most of it in the 100 MB puts.
Results: benchmarks/results/ingest.json.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

C.isolate_env()

import orjson  # noqa: E402

import offload.offloader as offloader_module  # noqa: E402
import offload.writes as writes_module  # noqa: E402
import offload.referencing as referencing_module  # noqa: E402
from offload import Offloader  # noqa: E402
from offload.store import Store, new_id, open_engine  # noqa: E402
from offload.tokens import TokenCounter  # noqa: E402
from offload.utf8 import utf8_facts  # noqa: E402

KINDS = {"text/grep": ("grep", "text"), "text/log": ("bash", "text"), "json": ("api", "json")}
ROUNDS = {1: 7, 10: 5, 100: 3}
QUICK_ROUNDS = {1: 5, 10: 3}
TEXT_GOAL, TEXT_DEFECT, JSON_GOAL = 2.0, 5.0, 2.0
FILE_WRITES = 3
WARM_UP = 40_000  # bytes: a small result of the same kind, put once on each store before the timed put


def make_data(kind: str, size: int) -> bytes:
    if kind == "json":
        return C.json_data(size)[0]
    return C.text_data(size, style=kind.split("/")[1])


# -- baselines ---------------------------------------------------------------------------------------

def file_write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def parse_gc_off(data: bytes) -> None:
    gc.disable()
    try:
        orjson.loads(data)
    finally:
        gc.enable()


def exact_facts(data: bytes) -> None:
    """The exact facts every reference states, each by the fastest pass there is here: sha256,
    characters and invalid bytes (`utf8_facts`, which decodes in parts), lines."""
    hashlib.sha256(data).digest()
    utf8_facts(data)
    data.count(b"\n")


# -- where Offloader.put spends its time ----------------------------------------------------------------

class Stages:
    """Times the stages of Offloader.put by wrapping the functions it calls (a few calls each: no
    measurable overhead). MAIN stages run on the caller's thread one after the other; AHEAD runs on a
    worker thread while the preview is built; NESTED runs inside a write (MAIN's or AHEAD's)."""

    WRAPPED = (("chunking", offloader_module, "chunk_bytes"), ("detect", referencing_module, "detect"),
               ("tokens", TokenCounter, "count_stored"), ("preview", referencing_module, "build_preview"),
               ("Store.put", Store, "put"), ("Store.put_content", Store, "put_content"),
               ("item index", writes_module, "json_item_index"),
               ("item index", writes_module, "ndjson_item_index"))
    MAIN = ("chunking", "detect", "tokens", "preview", "Store.put")
    AHEAD = ("Store.put_content",)
    NESTED = ("item index",)
    WORKER = AHEAD + NESTED  # the columns after "waiting"

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def active(self):
        saved = []
        for label, owner, name in self.WRAPPED:
            original = getattr(owner, name)
            saved.append((owner, name, original))
            setattr(owner, name, self._timed(label, original))
        try:
            yield self
        finally:
            for owner, name, original in saved:
                setattr(owner, name, original)

    def _timed(self, label, fn):
        if label == "chunking":  # a generator: time it as the list the offloader makes of it
            def wrapper(*args, **kwargs):
                t0 = time.perf_counter()
                try:
                    yield from list(fn(*args, **kwargs))
                finally:
                    self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - t0
            return wrapper

        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - t0
        return wrapper


def raw_row(tool: str) -> dict:
    return {"id": new_id("art_"), "namespace": "", "session": None, "tool": tool, "args": None, "kind": "text",
            "content_type": "text/plain", "tokens": 0, "shown_tokens": 0, "reference": None, "meta": None,
            "expires_at": None}


# -- one (kind, size, backend) cell ---------------------------------------------------------------------

def measure(stores: C.Stores, backend: str, kind: str, data: bytes, rounds: int) -> dict:
    tool, family = KINDS[kind]
    sha = hashlib.sha256(data).hexdigest()
    warm_up = make_data(kind, WARM_UP)
    file_path = os.path.join(stores.tmp.name, "baseline.bin")
    times: dict[str, list[float]] = {"file": [], "parse": [], "put": [], "settled": [], "store": [], "facts": []}
    stages: list[dict[str, float]] = []
    ref_kind = None
    for _ in range(rounds):
        for _ in range(FILE_WRITES):  # cheap next to a put, and the noisiest figure: several per round
            gc.collect()
            t0 = time.perf_counter()
            file_write(file_path, data)
            times["file"].append(time.perf_counter() - t0)
            os.remove(file_path)
        gc.collect()
        t0 = time.perf_counter()
        exact_facts(data)
        times["facts"].append(time.perf_counter() - t0)
        if family == "json":
            gc.collect()
            t0 = time.perf_counter()
            parse_gc_off(data)
            times["parse"].append(time.perf_counter() - t0)

        url = stores.url(backend)
        off = Offloader(url)
        off.store  # open and migrate outside the timing
        off.put(warm_up, tool=tool)  # a running agent's store has compiled its statements
        stage = Stages()
        gc.collect()
        with stage.active():
            t0 = time.perf_counter()
            ref = off.put(data, tool=tool)
            times["put"].append(time.perf_counter() - t0)
        off.close()  # waits for the WAL checkpoint that the put left to a background thread (SQLite)
        times["settled"].append(time.perf_counter() - t0)
        ref_kind = ref.kind
        stages.append(stage.seconds)
        stores.drop(backend, url)

        url = stores.url(backend)
        engine = open_engine(url)
        store = Store(engine, quota_bytes=10 * 1024**3)
        store.put(raw_row(tool), warm_up, hashlib.sha256(warm_up).hexdigest())
        row = raw_row(tool)
        gc.collect()
        t0 = time.perf_counter()
        store.put(row, data, sha)
        times["store"].append(time.perf_counter() - t0)
        engine.dispose()
        stores.drop(backend, url)
    med = {k: (C.med(v) if v else None) for k, v in times.items()}
    stage_med = {label: C.med([s.get(label, 0.0) for s in stages]) for label in Stages.MAIN + Stages.WORKER}
    stage_med["waiting"] = max(0.0, med["put"] - sum(stage_med[label] for label in Stages.MAIN))
    baseline = med["file"] + (med["parse"] or 0.0)
    return {"backend": backend, "kind": kind, "detected": ref_kind, "bytes": len(data), "rounds": rounds,
            "seconds": med, "all_seconds": times, "stages": stage_med, "baseline_s": baseline,
            "put_vs_baseline": med["put"] / baseline, "settled_vs_baseline": med["settled"] / baseline,
            "store_vs_file": med["store"] / med["file"], "facts_vs_file": med["facts"] / med["file"],
            "put_MBps": len(data) / C.MB / med["put"], "store_MBps": len(data) / C.MB / med["store"]}


def verdict(cell: dict) -> str:
    if cell["backend"] != "sqlite":
        return "–"
    ratio = cell["put_vs_baseline"]
    if cell["kind"].startswith("text"):
        if ratio <= TEXT_GOAL:
            return "met (≤2x)"
        return f"DEFECT (>{TEXT_DEFECT:g}x)" if ratio > TEXT_DEFECT else "missed (>2x)"
    return "met (≤2x)" if ratio <= JSON_GOAL else "missed (>2x)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 and 10 MB only, fewer rounds")
    ap.add_argument("--backends", default="sqlite,duckdb,postgresql")
    ap.add_argument("--all-kinds", action="store_true", help="text/log on every backend, not only SQLite")
    ap.add_argument("--sizes", help="MB, comma-separated (default 1,10,100; --quick 1,10)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated: " + ", ".join(KINDS))
    ap.add_argument("--no-profile", action="store_true")
    args = ap.parse_args()
    rounds_by_size = dict(QUICK_ROUNDS if args.quick else ROUNDS)
    if args.sizes:
        rounds_by_size = {int(x): (QUICK_ROUNDS if args.quick else ROUNDS).get(int(x), 3)
                          for x in args.sizes.split(",")}
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    started = time.perf_counter()
    cells: list[dict] = []
    profiles: dict[str, dict] = {}
    with C.Stores(backends) as stores:
        backends = stores.backends
        for kind in kinds:
            for size_mb, rounds in rounds_by_size.items():
                data = make_data(kind, size_mb * C.MB)
                for backend in backends:
                    if kind == "text/log" and backend != "sqlite" and not args.all_kinds:
                        continue
                    cell = measure(stores, backend, kind, data, rounds)
                    cell["size_mb"] = size_mb
                    cells.append(cell)
                    s = cell["seconds"]
                    print(f"  {kind:9} {size_mb:>3} MB {backend:10} file {C.fmt_ms(s['file'])} ms"
                          f"{'' if s['parse'] is None else ' parse ' + C.fmt_ms(s['parse']) + ' ms'}"
                          f"  put {C.fmt_ms(s['put'])} ms  Store.put {C.fmt_ms(s['store'])} ms"
                          f"  put/baseline {cell['put_vs_baseline']:.1f}x", file=sys.stderr, flush=True)
                if not args.no_profile and "sqlite" in backends:
                    url = stores.url("sqlite")
                    off = Offloader(url)
                    tool = KINDS[kind][0]
                    off.put(make_data(kind, WARM_UP), tool=tool)
                    profiles[f"{kind} {size_mb} MB"] = C.profile_call(lambda: off.put(data, tool=tool))
                    off.close()
                    stores.drop("sqlite", url)
                del data
                gc.collect()

    rows = []
    for c in cells:
        s = c["seconds"]
        rows.append([c["kind"], c["size_mb"], c["backend"], C.fmt_ms(s["file"]),
                     "–" if s["parse"] is None else C.fmt_ms(s["parse"]), C.fmt_ms(s["put"]), C.fmt_ms(s["store"]),
                     f"{c['put_vs_baseline']:.1f}x", f"{c['settled_vs_baseline']:.1f}x",
                     f"{c['store_vs_file']:.1f}x", f"{c['facts_vs_file']:.1f}x", f"{c['put_MBps']:.0f}",
                     verdict(c)])
    print("\n## Ingest (medians; ratios against baselines measured in the same rounds)\n")
    print(C.table(["data", "MB", "backend", "file+fsync ms", "orjson parse ms (gc off)", "Offloader.put ms",
                   "Store.put ms", "put ÷ baseline", "put + checkpoint ÷ baseline", "Store.put ÷ file",
                   "exact facts ÷ file", "put MB/s",
                   "goal (SQLite)"], rows))
    print("\nbaseline = file write + fsync (text), file write + fsync + orjson parse with gc off (JSON). "
          "Goal: ≤2x; text over 5x is a defect. put + checkpoint: until the background WAL checkpoint "
          "that the put leaves behind (SQLite) has also finished, and the store is closed. exact facts: what "
          "every reference states exactly (sha256, characters, lines), each by the fastest pass there is, "
          "against "
          "the file write: Store.put ÷ file plus this is what the put would cost on one thread before any "
          "preview, token estimate or shape (a big put hashes and writes on a worker thread meanwhile).")

    srows = []
    for c in cells:
        if c["backend"] != "sqlite":
            continue
        put = c["seconds"]["put"]
        st = c["stages"]
        labels = Stages.MAIN + ("waiting",) + Stages.WORKER
        srows.append([c["kind"], c["size_mb"], C.fmt_ms(put)] +
                     [f"{C.fmt_ms(st[k])} ({st[k] / put:.0%})" for k in labels])
    print("\n## Where Offloader.put spends its time on SQLite (ms, share of put)\n")
    print("The caller's thread: " + ", ".join(Stages.MAIN) + ", then waiting (below 512 KiB the caller's "
          "hash; rendering; from 512 KiB the worker's hash and write). On a worker thread "
          "from 512 KiB, after the hash, overlapping the token estimate and the preview: "
          + ", ".join(Stages.AHEAD) + ". Inside whichever write stores the content: " + ", ".join(Stages.NESTED)
          + ".\n")
    print(C.table(["data", "MB", "put ms", *Stages.MAIN, "waiting", *(f"{k} (worker)" for k in Stages.AHEAD),
                   *(f"{k} (in the write)" for k in Stages.NESTED)], srows))

    findings = []
    if profiles:
        print("\n## Profiles of Offloader.put on SQLite: the offload functions with the most exclusive time\n")
        print("exclusive = own time + what it calls outside offload (C built-ins, jmespath, SQLAlchemy...) down to "
              "the next offload function: what changing that function could change.\n")
        prow = []
        for name, prof in profiles.items():
            top = prof["top_offload_exclusive"][:3]
            prow.append([name, f"{prof['wall_s'] * 1000:,.0f}"] +
                        [f"{r['function']} {r['share']:.0%}" for r in top] + [""] * (3 - len(top)))
            if top:
                findings.append(f"{name}: {top[0]['function']} ({top[0]['share']:.0%})")
        print(C.table(["profile", "ms (profiled)", "1st", "2nd", "3rd"], prow))
        for name in [n for n in profiles if n.endswith(f" {max(rounds_by_size)} MB")]:
            prof = profiles[name]
            print(f"\nInclusive time, {name}:\n")
            print(C.table(["function", "s", "share"], [[r["function"], f"{r['seconds']:.3f}", f"{r['share']:.0%}"]
                                                      for r in prof["top_offload_total"][:10]]))
    missed = [c for c in cells if c["backend"] == "sqlite" and not verdict(c).startswith("met")]
    print("\n## Goals\n")
    for c in cells:
        if c["backend"] == "sqlite":
            print(f"- {c['kind']} {c['size_mb']} MB: put ÷ baseline {c['put_vs_baseline']:.1f}x → {verdict(c)}")
    if findings:
        print("\nDominant function per profile: " + "; ".join(findings))
    for c in cells:
        if c["backend"] == "sqlite":
            c["verdict"] = verdict(c)
    elapsed = time.perf_counter() - started
    print(f"\n(ran in {elapsed:.0f} s)")
    out = C.write_results("ingest", {
        "quick": args.quick, "cells": cells, "profiles": {k: {kk: vv for kk, vv in v.items()}
                                                          for k, v in profiles.items()},
        "goals": {"text_vs_file": TEXT_GOAL, "text_defect": TEXT_DEFECT, "json_vs_file_plus_parse": JSON_GOAL},
        "missed": [f"{c['kind']} {c['size_mb']} MB" for c in missed], "elapsed_s": elapsed})
    print(f"results: {out}")


if __name__ == "__main__":
    main()
