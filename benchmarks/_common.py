"""Shared helpers for the benchmarks: realistic data, timing, stores per backend, tables and JSON output.

Not a benchmark itself (the leading underscore keeps it apart from the runnable scripts). Every figure
a benchmark reports is a median of several runs, and every goal is a ratio against a baseline measured
in the same process, because the machines are shared and noisy.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import gc
import json
import os
import platform
import random
import resource
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
STDLIB = Path(os.__file__).parent
MB = 1_000_000
PG_ADMIN = os.environ.get("OFFLOAD_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


# -- realistic data ----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _stdlib_files_cached() -> tuple[Path, ...]:
    return tuple(sorted(p for p in STDLIB.rglob("*.py") if "site-packages" not in p.parts))


def _stdlib_files() -> list[Path]:
    return list(_stdlib_files_cached())


_LEVELS = ["INFO"] * 12 + ["DEBUG"] * 6 + ["WARNING"] * 2 + ["ERROR"]


def text_lines(style: str = "grep", seed: int = 1) -> Iterator[bytes]:
    """Endless lines made from the real lines of stdlib files, in one of two styles.

    grep: `grep -rn` output over the stdlib tree (path:line:text, a file's matches together).
    log: an application log quoting source lines (timestamp, level, logger, message).
    """
    rng = random.Random(seed)
    files = _stdlib_files()
    clock = dt.datetime(2026, 11, 3, 8, 0, 0)
    while True:
        rng.shuffle(files)
        for path in files:
            try:
                lines = path.read_bytes().splitlines()
            except OSError:
                continue
            name = str(path).encode()
            module = path.stem.encode()
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                if style == "grep":
                    yield b"%s:%d:%s\n" % (name, number, line)
                else:
                    clock += dt.timedelta(milliseconds=rng.randint(1, 900))
                    level = rng.choice(_LEVELS).encode()
                    yield b"%s %-7s [%s] %s\n" % (clock.isoformat(sep=" ", timespec="milliseconds").encode(),
                                                  level, module, line.strip())


def text_blocks(size: int, style: str = "grep", seed: int = 1, block: int = 4 << 20) -> Iterator[bytes]:
    """`size` bytes (cut at a line end near it) of text_lines, in blocks of about `block` bytes."""
    produced = 0
    parts: list[bytes] = []
    pending = 0
    for line in text_lines(style, seed):
        parts.append(line)
        pending += len(line)
        if produced + pending >= size:
            break
        if pending >= block:
            yield b"".join(parts)
            produced += pending
            parts, pending = [], 0
    if parts:
        yield b"".join(parts)


def text_data(size: int, style: str = "grep", seed: int = 1) -> bytes:
    return b"".join(text_blocks(size, style, seed))


_STATUSES = ["ok"] * 14 + ["pending"] * 3 + ["error", "timeout"]  # low cardinality, errors ~5%


@functools.lru_cache(maxsize=None)
def _names() -> list[str]:
    names = set()
    for path in _stdlib_files()[:400]:
        try:
            for line in path.read_text(errors="replace").splitlines():
                s = line.strip()
                if s.startswith(("def ", "class ")):
                    names.add(s.split()[1].split("(")[0].split(":")[0])
        except OSError:
            continue
    return sorted(n for n in names if n.isidentifier())


def json_items(count: int, seed: int = 2) -> list[dict[str, Any]]:
    """`count` API-like records: ids, a low-cardinality status, names, nested owner and tags."""
    rng = random.Random(seed)
    names = _names()
    start = dt.datetime(2026, 1, 1)
    items = []
    for i in range(count):
        name = rng.choice(names)
        items.append({
            "id": i + 1,
            "status": rng.choice(_STATUSES),
            "name": name,
            "created_at": (start + dt.timedelta(seconds=i * 37)).isoformat() + "Z",
            "duration_ms": round(rng.lognormvariate(3, 1.2), 2),
            "owner": {"id": rng.randint(1, 5000), "login": rng.choice(names).lower()[:12]},
            "tags": rng.sample(["api", "db", "io", "net", "cache", "auth"], rng.randint(0, 2)),
        })
    return items


def json_data(size: int, seed: int = 2) -> tuple[bytes, int]:
    """A JSON array of objects of about `size` bytes; returns (bytes, number of objects)."""
    probe = orjson.dumps(json_items(2000, seed))
    per_item = len(probe) / 2000
    count = max(1, int(size / per_item))
    enabled = gc.isenabled()
    gc.disable()  # millions of small objects: the cyclic GC would rescan them over and over
    try:
        data = orjson.dumps(json_items(count, seed))
    finally:
        if enabled:
            gc.enable()
    return data, count


# -- timing ------------------------------------------------------------------------------------------

def med(values: list[float]) -> float:
    return statistics.median(values)


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB


# -- stores ------------------------------------------------------------------------------------------

def pg_available() -> bool:
    try:
        import sqlalchemy as sa

        engine = sa.create_engine(PG_ADMIN, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        engine.dispose()
        return True
    except Exception:  # noqa: BLE001 - any failure means not reachable
        return False


class Stores:
    """Fresh empty stores on demand, per backend, all removed on close (the PostgreSQL database too)."""

    def __init__(self, backends: list[str]):
        self.tmp = tempfile.TemporaryDirectory(prefix="offload-bench-")
        self.backends = list(backends)
        self.pg_db: str | None = None
        self._n = 0
        if "postgresql" in self.backends:
            if pg_available():
                import sqlalchemy as sa

                self.pg_db = f"offload_bench_{secrets.token_hex(4)}"
                admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
                with admin.connect() as conn:
                    conn.exec_driver_sql(f'CREATE DATABASE "{self.pg_db}"')
                admin.dispose()
            else:
                print("PostgreSQL does not answer on 127.0.0.1:5432: skipping that backend", file=sys.stderr)
                self.backends.remove("postgresql")

    def url(self, backend: str) -> str:
        """The URL of a brand-new, empty store (a new file, or a new PostgreSQL schema)."""
        self._n += 1
        if backend == "sqlite":
            return f"sqlite:///{self.tmp.name}/s{self._n}.db"
        if backend == "duckdb":
            return f"duckdb:///{self.tmp.name}/s{self._n}.duckdb"
        import sqlalchemy as sa

        db_url = sa.engine.make_url(PG_ADMIN).set(database=self.pg_db)
        schema = f"s{self._n}"
        engine = sa.create_engine(db_url)
        with engine.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        engine.dispose()
        return db_url.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
            hide_password=False)

    def drop(self, backend: str, url: str) -> None:
        """Free the space of a store made by url() once it is no longer needed."""
        if backend in ("sqlite", "duckdb"):
            path = url.split(":///", 1)[1]
            for suffix in ("", "-wal", "-shm", ".wal"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path + suffix)
        else:
            import sqlalchemy as sa

            schema = url.rsplit("search_path%3D", 1)[-1].rsplit("search_path=", 1)[-1]
            db_url = sa.engine.make_url(PG_ADMIN).set(database=self.pg_db)
            engine = sa.create_engine(db_url)
            with engine.begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            engine.dispose()

    def close(self) -> None:
        if self.pg_db:
            import sqlalchemy as sa

            admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{self.pg_db}" WITH (FORCE)')
            admin.dispose()
            self.pg_db = None
        self.tmp.cleanup()

    def __enter__(self) -> "Stores":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def isolate_env() -> None:
    """No OFFLOAD_* settings or config file from the caller's environment leak into a benchmark."""
    for key in list(os.environ):
        if key.startswith("OFFLOAD_"):
            del os.environ[key]
    os.environ["OFFLOAD_CONFIG"] = os.devnull  # an empty TOML file: defaults only


# -- output ------------------------------------------------------------------------------------------

def table(headers: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
        if isinstance(v, int) and not isinstance(v, bool):
            return f"{v:,}"
        return str(v)

    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(out)


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1000
    if ms < 1:
        return f"{ms:.3f}"
    if ms < 10:
        return f"{ms:.2f}"
    if ms < 100:
        return f"{ms:.1f}"
    return f"{ms:,.0f}"


def environment() -> dict[str, Any]:
    import importlib.metadata as md

    versions = {}
    for pkg in ("sqlalchemy", "duckdb", "duckdb-sqlalchemy", "psycopg", "orjson", "jmespath", "numpy"):
        with contextlib.suppress(md.PackageNotFoundError):
            versions[pkg] = md.version(pkg)
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "load_avg": os.getloadavg(), "packages": versions,
            "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def write_results(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "environment": environment(), **payload}
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path


# -- profiling ---------------------------------------------------------------------------------------

def _frame_name(frame) -> str:
    path = frame.file_path or ""
    if path == "<built-in>":
        return f"{frame.function} <built-in>"
    short = path
    for marker in ("/offload/", "/site-packages/", "/lib/python3"):
        if marker in path:
            short = path.split(marker, 1)[1]
            short = ("offload/" + short) if marker == "/offload/" else short
            break
    return f"{frame.function} ({short}:{frame.line_no})"


def profile_call(fn: Callable[[], Any], interval: float = 0.001) -> dict[str, Any]:
    """Profile one call: pyinstrument when installed (sampling, low distortion), else cProfile.

    Returns the wall time, the functions with the most time of their own, and for offload's functions
    two views: "exclusive" = the function's own time plus everything it calls outside offload (C
    built-ins such as a bytes slice, libraries such as jmespath or SQLAlchemy) down to the next offload
    function -- what changing that one function could change; and "total" (inclusive) time.
    """
    try:
        from pyinstrument import Profiler
    except ImportError:
        return _cprofile_call(fn)
    profiler = Profiler(interval=interval)
    profiler.start()
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    profiler.stop()
    root = profiler.last_session.root_frame()
    own: dict[str, float] = {}
    exclusive: dict[str, float] = {}
    total: dict[str, float] = {}

    def is_offload(frame) -> bool:
        return "/offload/" in (frame.file_path or "") and "/benchmarks/" not in (frame.file_path or "")

    def below(frame) -> float:  # time in the nearest offload functions under `frame`
        return sum(c.time if is_offload(c) else below(c) for c in frame.children if not c.is_synthetic)

    def walk(frame, path: frozenset[str]) -> None:
        if frame.is_synthetic:
            return
        name = _frame_name(frame)
        children = [c for c in frame.children if not c.is_synthetic]
        own[name] = own.get(name, 0.0) + frame.time - sum(c.time for c in children)
        if is_offload(frame):
            exclusive[name] = exclusive.get(name, 0.0) + frame.time - below(frame)
            if name not in path:  # recursion counts once
                total[name] = total.get(name, 0.0) + frame.time
        for child in children:
            walk(child, path | {name})

    walk(root, frozenset())
    top = lambda d, n: [  # noqa: E731
        {"function": k, "seconds": round(v, 4), "share": round(v / wall, 3)}
        for k, v in sorted(d.items(), key=lambda kv: -kv[1])][:n]
    return {"profiler": "pyinstrument", "wall_s": wall, "top_self": top(own, 12),
            "top_offload_exclusive": top(exclusive, 10), "top_offload_total": top(total, 14),
            "text": profiler.output_text(unicode=False, color=False, show_all=False)}


def _cprofile_call(fn: Callable[[], Any]) -> dict[str, Any]:
    import cProfile
    import pstats

    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.runcall(fn)
    wall = time.perf_counter() - t0
    stats = pstats.Stats(prof)
    rows = []
    for (file, line, func), (_cc, _nc, tt, ct, _callers) in stats.stats.items():
        rows.append((f"{func} ({file.rsplit('/', 2)[-2:] if '/' in file else file}:{line})", tt, ct, file))
    top_self = sorted(rows, key=lambda r: -r[1])[:12]
    top_total = sorted((r for r in rows if "/offload/" in r[3]), key=lambda r: -r[2])[:14]
    return {"profiler": "cProfile", "wall_s": wall,
            "top_self": [{"function": r[0], "seconds": round(r[1], 4), "share": round(r[1] / wall, 3)}
                         for r in top_self],
            "top_offload_exclusive": [],
            "top_offload_total": [{"function": r[0], "seconds": round(r[2], 4), "share": round(r[2] / wall, 3)}
                                  for r in top_total]}
