"""The statement check in front of the SQL sandbox: one read-only SELECT whose parsed tree (DuckDB's
`json_serialize_sql`) reads only the table `artifact` or its own CTEs and calls no function that reads
settings, files or logs, runs SQL given as text, or builds a huge value from a small literal.

DuckDB's own lock (no external access, locked configuration) is the second wall; this is the first.
"""

from __future__ import annotations

import re
from typing import Any

import duckdb
import orjson

__all__ = ["find_problem"]

# Refused by their first word before DuckDB even parses them (IMPORT DATABASE reads files at parse time).
_FORBIDDEN_KEYWORDS = frozenset(
    {"PRAGMA", "SHOW", "SET", "RESET", "CALL", "EXPLAIN", "IMPORT", "EXPORT", "ATTACH", "DETACH", "COPY",
     "INSTALL", "LOAD", "USE", "CHECKPOINT", "VACUUM", "CREATE", "INSERT", "UPDATE", "DELETE", "DROP",
     "ALTER", "TRUNCATE", "PREPARE", "EXECUTE", "BEGIN", "COMMIT", "ROLLBACK", "ANALYZE", "MERGE"}
)

# Table functions a query may use in FROM; every other one (read_*, glob, query, query_table,
# duckdb_*, pragma_*, json_execute_serialized_sql, arrow_scan, checkpoint, histogram, ...) is refused.
ALLOWED_TABLE_FUNCTIONS = frozenset(
    {"range", "generate_series", "unnest", "json_each", "json_tree", "repeat", "repeat_row"}
)

# Functions that read settings, variables or logs, run SQL given as text, or only waste time.
_DENIED_FUNCTIONS = frozenset(
    {"current_setting", "getvariable", "getenv", "query", "query_table", "json_execute_serialized_sql",
     "json_serialize_plan", "json_serialize_sql", "write_log", "parse_duckdb_log_message", "sleep_ms",
     "pg_sleep", "pg_postmaster_start_time", "pg_conf_load_time", "which_secret",
     # repeat(text, n) builds one value of len(text) * n bytes outside DuckDB's memory limit.
     "repeat",
     # A fold feeds each step's value to the next: (a, b) -> a || a doubles a string per element, past
     # the memory limit and past the time limit (measured: 2.4 GB against 256 MB, 8.7 s against 5 s).
     "list_reduce", "array_reduce", "reduce"}
)
_DENIED_PREFIXES = ("duckdb_", "pragma_", "read_", "parquet_", "sniff_", "arrow_", "pandas_", "python_")

# Functions whose result size is set by an argument: DuckDB builds such a value outside its memory
# limit and does not stop it on interrupt (measured: repeat('x', 1e9) took 2 GB and 6.7 s against a
# 256 MB / 3 s limit), so the size must be a literal integer under a cap. Values: (indexes of the size
# arguments, cap); None = every argument.
_SIZED_FUNCTIONS: dict[str, tuple[tuple[int, ...] | None, int]] = {
    "lpad": ((1,), 10_000),
    "rpad": ((1,), 10_000),
    "range": (None, 1_000),
    "generate_series": (None, 1_000),
    "list_resize": ((1,), 1_000),
    "array_resize": ((1,), 1_000),
    "to_base": ((2,), 1_000),
    "bar": ((3,), 1_000),
    "equi_width_bins": ((2,), 1_000),
}
# Lists built from a literal size multiply when nested (list_transform(range(n), x -> range(n)) took
# 2.9 GB): one per query.
_LIST_BUILDERS = frozenset({"range", "generate_series", "list_resize", "array_resize", "equi_width_bins"})
# printf/format widths and precisions come from the format string: literal, and no 5-digit width or
# width taken from an argument (`%*d`, `{:{}}`).
_FORMAT_FUNCTIONS = frozenset({"printf", "format"})
_WIDE_FORMAT = re.compile(r"\d{5,}|\*|\{[^}]*\{")


def find_problem(cursor: duckdb.DuckDBPyConnection, sql: str, catalog_names: frozenset[str]) -> str | None:
    """Why `sql` may not run in the sandbox (a message for the model), or None when it may."""
    if not sql or not sql.strip():
        return "The SQL query is empty."
    first_word = _first_word(sql)
    if first_word in _FORBIDDEN_KEYWORDS:
        return f"{first_word} statements are not allowed; only a read-only SELECT is."
    try:
        statements = cursor.extract_statements(sql)
    except duckdb.PermissionException:
        return "This statement needs access outside the artifact, which is not allowed; only a read-only SELECT is."
    except duckdb.Error as exc:
        if "max_expression_depth" in str(exc):  # DuckDB's advice is a SET, which the sandbox forbids
            return ("The SQL is nested too deeply for DuckDB's parser (more than 1,000 levels of parentheses or "
                    "operators): write it with fewer levels, e.g. IN (…) or a CASE instead of a long chain of "
                    "OR or +.")
        return f"SQL syntax error: {exc}"
    if len(statements) != 1:
        extra = (
            " PIVOT without an IN list needs two statements; name the values: "
            "PIVOT artifact ON status IN ('ok', 'error') USING count(*)."
            if "pivot" in sql.lower()
            else ""
        )
        return f"Send exactly one statement; this query has {len(statements)}.{extra}"
    if statements[0].type != duckdb.StatementType.SELECT:
        return f"{statements[0].type.name} statements are not allowed; only a read-only SELECT is."
    (text,) = cursor.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()
    tree = orjson.loads(text)
    if tree.get("error") or len(tree.get("statements", ())) != 1:
        # Statements DuckDB rewrites before parsing them (PRAGMA behind a comment, ...).
        return "This statement could not be checked; only a plain read-only SELECT is allowed."
    found = _walk(tree["statements"][0], catalog_names)
    if found:
        message, location = found
        return message + _caret(sql, location)
    return None


def _first_word(sql: str) -> str:
    stripped = sql.lstrip(" \t\r\n(;")
    match = re.match(r"[A-Za-z_]+", stripped)
    return match.group(0).upper() if match else ""


def _walk(statement: dict, catalog_names: frozenset[str]) -> tuple[str, int | None] | None:
    """Return (reason, query_location) for the first table or function a query may not use, or None."""
    cte_names: set[str] = set()
    stack: list[Any] = [statement]
    while stack:  # first pass: the names the query defines for itself
        node = stack.pop()
        if isinstance(node, dict):
            cte_map = node.get("cte_map") or {}
            cte_names.update(str(entry.get("key", "")).lower() for entry in cte_map.get("map", ()))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    # An unqualified name resolves to a CTE only within the CTE's scope and to the catalog outside it;
    # a CTE may therefore not take a system table's name, and then any CTE name is safe anywhere.
    shadowing = sorted(cte_names & catalog_names)
    if shadowing:
        return f"Rename the CTE {shadowing[0]!r}: that name belongs to a system table.", None

    list_builders = 0
    stack = [statement]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        location = node.get("query_location")
        if node.get("type") == "TABLE_FUNCTION":
            function = node.get("function") or {}
            name = str(function.get("function_name", "")).lower()
            if name not in ALLOWED_TABLE_FUNCTIONS:
                return (
                    f"The table function {name}() is not available: queries read only the table `artifact` "
                    f"(table functions allowed: {', '.join(sorted(ALLOWED_TABLE_FUNCTIONS))}).",
                    location,
                )
            stack.extend(function.get("children") or ())
            stack.extend(value for key, value in node.items() if key != "function")
            continue
        if node.get("table_name"):
            table = str(node["table_name"]).lower()
            schema = str(node.get("schema_name") or "").lower()
            catalog = str(node.get("catalog_name") or "").lower()
            own = table == "artifact" and schema in ("", "main") and catalog in ("", "memory")
            if not own and not (table in cte_names and not schema and not catalog):
                shown = ".".join(part for part in (catalog, schema, table) if part)
                return f"Unknown table {shown!r}: the only table is `artifact`.", location
        if "function_name" in node:
            name = str(node["function_name"]).lower()
            problem = _function_problem(name, node.get("children") or [])
            if problem:
                return problem, location
            list_builders += name in _LIST_BUILDERS
            if list_builders > 1:
                return (
                    f"Use at most one of {', '.join(sorted(_LIST_BUILDERS))}() per query as a value "
                    "(in FROM, as a table, they are not limited).",
                    location,
                )
        stack.extend(node.values())
    return None


def _function_problem(name: str, arguments: list) -> str | None:
    if name in _DENIED_FUNCTIONS or name.startswith(_DENIED_PREFIXES):
        return f"The function {name}() is not available in artifact queries."
    if name in _SIZED_FUNCTIONS:
        indexes, cap = _SIZED_FUNCTIONS[name]
        for index in range(len(arguments)) if indexes is None else indexes:
            if index >= len(arguments):
                continue
            value = _literal(arguments[index])
            if not isinstance(value, int) or isinstance(value, bool) or abs(value) > cap:
                return (
                    f"{name}() needs a literal integer size of at most {cap:,} here "
                    "(a computed or larger size could exhaust memory)."
                )
    if name in _FORMAT_FUNCTIONS and arguments:
        template = _literal(arguments[0])
        if not isinstance(template, str) or _WIDE_FORMAT.search(template):
            return (
                f"{name}() needs a literal format string without '*', nested '{{}}' or widths of 5+ digits."
            )
    return None


def _literal(node: Any) -> Any:
    """The value of a literal constant in the tree, or None for anything computed."""
    if isinstance(node, dict) and node.get("type") == "VALUE_CONSTANT":
        value = node.get("value") or {}
        return None if value.get("is_null") else value.get("value")
    return None


def _caret(sql: str, location: int | None) -> str:
    if location is None or not 0 <= location < len(sql):
        return ""
    line_start = sql.rfind("\n", 0, location) + 1
    line_end = sql.find("\n", location)
    line = sql[line_start : None if line_end < 0 else line_end]
    return f"\n  {line}\n  {' ' * (location - line_start)}^"
