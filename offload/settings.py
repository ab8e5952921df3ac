"""One settings object: code arguments over OFFLOAD_* environment over a config file over defaults.

Per-tool budgets are keyed by tool name through aliases (cat → read, rg → grep, ...), so a harness's
own tool names get sensible limits without configuration. The config file is TOML: OFFLOAD_CONFIG, else
`.offload/config.toml` in the project store, else `config.toml` in the user's offload config folder.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import logging
import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource
from pydantic_settings.exceptions import SettingsError

from .errors import InvalidSetting

log = logging.getLogger("offload")

# Defaults from current practice (tokens): see DESIGN.md and the issue that set them.
DEFAULT_LIMITS: dict[str, int] = {
    "read": 8000,
    "shell": 6000,
    "shell_stderr": 2000,
    "grep": 4000,
    "glob": 2000,
    "default": 4000,
}

# The least a reference takes (its short wording: exact sizes, the artifact id, the next calls; a long
# tool name and a shell result's exit code and stderr artifact included), measured with o200k_base and
# cl100k_base. A limit below it would replace a result with a reference about as big, and a reference
# could not keep within it: such a limit, or a window whose share is below it, is refused.
MIN_LIMIT = 200

# The least a fetch_slice or query_artifact page budget may be: a page's envelope (ids, offsets, the next
# call, and for a cut line or item or a left-out element the sentence that says so) takes up to ~190
# tokens by o200k/cl100k, the page budget keeps a margin for the heuristic counter, and the rest must still
# carry content. At 100–150 a cut page went over (157–186 tokens), at 250 it showed 1–26 tokens of the
# line, and a query page naming a left-out element could not be built at all below ~350.
MIN_PAGE = 400

DEFAULT_ALIASES: dict[str, str] = {
    "read_file": "read", "read_text_file": "read", "cat": "read",
    "bash": "shell", "sh": "shell", "exec": "shell", "run_command": "shell",
    "grep": "grep", "rg": "grep", "search_code": "grep",
    "glob": "glob", "find": "glob", "list_files": "glob",
}


def config_file() -> Path | None:
    explicit = os.environ.get("OFFLOAD_CONFIG")
    if explicit:
        return Path(explicit)
    from .store.engines import find_project_store

    project = find_project_store()
    if project and (project / "config.toml").exists():
        return project / "config.toml"
    import platformdirs

    user = Path(platformdirs.user_config_dir("offload", appauthor=False)) / "config.toml"
    return user if user.exists() else None


def _check_config_file() -> None:
    """OFFLOAD_CONFIG names a file that must be there: a path to nothing was read as no config at all
    (/dev/null is an empty one: defaults only)."""
    explicit = os.environ.get("OFFLOAD_CONFIG")
    if explicit and (not Path(explicit).exists() or Path(explicit).is_dir()):
        what = "a directory" if Path(explicit).is_dir() else "not there"
        raise InvalidSetting(f"OFFLOAD_CONFIG={explicit!r} is {what}: give the path of a TOML file, or unset "
                             "it to use the project's or the user's config.toml")


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


@functools.lru_cache(maxsize=16)
def _warn_unknown_keys(path: str, _mtime: float | None, known: frozenset[str]) -> None:
    """A config file's keys that are no setting are ignored (a newer offload's may be there), but said,
    once per file and version of it, with the nearest setting: `refrence_tokens = 300` or a `[limit]`
    table left the defaults in force, silently."""
    try:
        with open(path, "rb") as file:
            keys = list(tomllib.load(file))
    except (OSError, tomllib.TOMLDecodeError):
        return  # the TOML source says what is wrong with it
    for key in keys:
        if key not in known:
            near = difflib.get_close_matches(key, sorted(known), n=1)
            log.warning("offload: the config file %s sets %r, which is no setting; it is ignored%s", path, key,
                        f" (did you mean {near[0]!r}?)" if near else "")


def _cause(exc: BaseException) -> str:
    return f" ({exc.__cause__})" if exc.__cause__ else ""


def too_small(floor: int) -> str:
    """Why a limit below `floor` is refused, and what would work (said by settings and `--limit`)."""
    return (f"a result over a limit below {floor} tokens would become a reference about as big (the least "
            f"a reference takes: sizes, artifact id, next calls); use at least {floor}")


def load_settings(**given: Any) -> "Settings":
    """Settings from code arguments, the environment and the config file; a value that cannot work is an
    InvalidSetting naming the setting, the variable that sets it, and what would work."""
    return Settings(**given)


_HINTS = {"ttl_days": "; none (None in code) keeps artifacts until deleted",
          "quota_bytes": "; none (None in code) sets no quota"}


def _invalid(exc: ValidationError) -> InvalidSetting:
    """pydantic's errors as one InvalidSetting: each setting, its OFFLOAD_* variable, and the value."""
    problems = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        name = ".".join(loc)
        env = ("OFFLOAD_LIMIT_" + (loc[1].upper() if len(loc) > 1 else "<TOOL>") if loc[:1] == ["limits"]
               else f"OFFLOAD_{loc[0].upper()}" if loc else "")
        message = error["msg"].removeprefix("Value error, ")
        got = f" (got {error['input']!r})" if loc and not isinstance(error["input"], dict) else ""
        hint = _HINTS.get(loc[0], "") if loc else ""
        problems.append(f"{name}{f' ({env})' if env else ''}: {message}{got}{hint}" if name else message)
    path = config_file()
    where = f"; the config file read is {path}" if path else ""
    return InvalidSetting(f"invalid setting — {'; '.join(problems)}{where}")


class _ToolLimitEnv(PydanticBaseSettingsSource):
    """OFFLOAD_LIMIT_<TOOL>=<tokens> → limits[<tool>] (lower-cased)."""

    def get_field_value(self, field, field_name):  # pragma: no cover - required by the interface
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        limits = {}
        for key, value in os.environ.items():
            if key.startswith("OFFLOAD_LIMIT_") and value.strip():
                try:
                    limits[key[len("OFFLOAD_LIMIT_"):].lower()] = int(value)
                except ValueError:
                    raise InvalidSetting(f"{key}={value!r}: a tool's limit is a whole number of tokens "
                                         f"(at least {MIN_LIMIT})") from None
        return {"limits": limits} if limits else {}


class Settings(BaseSettings):
    """Everything offload can be told. Each field: OFFLOAD_<NAME> in the environment, or the config file."""

    # OFFLOAD_TTL_DAYS=none (or OFFLOAD_QUOTA_BYTES=none): no TTL, no quota
    model_config = SettingsConfigDict(env_prefix="OFFLOAD_", extra="ignore", validate_default=True,
                                      env_parse_none_str="none")

    def __init__(self, **values: Any) -> None:
        # built directly or through load_settings, a value that cannot work is the same InvalidSetting
        _check_config_file()
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise _invalid(exc) from None
        except SettingsError as exc:  # a variable holding JSON (OFFLOAD_LIMITS) that is not JSON
            raise InvalidSetting(f"invalid setting — {exc}{_cause(exc)}: a setting that is a table is JSON in "
                                 "the environment, e.g. OFFLOAD_LIMITS='{\"grep\": 6000}' (or "
                                 "OFFLOAD_LIMIT_GREP=6000)") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as exc:
            raise InvalidSetting(f"the config file {config_file()} cannot be read: {exc}") from None

    url: str | None = Field(None, description="Store URL (sqlite:///…, duckdb:///…, postgresql://…) or a file path.")
    namespace: str = Field("", description="Isolation boundary: a tenant, user or team; sees only its artifacts.")
    limits: dict[str, int] = Field(default_factory=dict,
                                   description="Per-tool token budgets, by tool name or alias target; merged over the defaults.")
    aliases: dict[str, str] = Field(default_factory=dict, description="Extra tool-name aliases (name or glob → budget key).")
    reference_tokens: int = Field(800, ge=MIN_LIMIT, description="Budget of a whole reference, in tokens.")
    grep_max_lines: int = Field(200, ge=1, description="At most this many grep lines in a preview.")
    window_tokens: int | None = Field(None, gt=0, description="The model's context window, when known.")
    window_share: float = Field(0.30, gt=0, le=1, description="No single result takes more than this share of the window.")
    slice_tokens: int = Field(4000, ge=MIN_PAGE, description="Budget of one fetch_slice page.")
    query_tokens: int = Field(4000, ge=MIN_PAGE, description="Budget of an inline query result; larger ones are stored.")
    ttl_days: float | None = Field(7.0, gt=0, le=36_500, allow_inf_nan=False,
                                   description="Artifacts expire after this many days (None, or none in the "
                                               "environment: never).")
    quota_bytes: int | None = Field(10 * 1024**3, gt=0, description="Store size quota; gc evicts least recently used "
                                                                      "above it (None: no quota).")
    busy_timeout: float = Field(30.0, ge=0, le=86_400, allow_inf_nan=False,
                                description="Seconds to wait for a busy store (a SQLite write lock, a PostgreSQL "
                                            "row, table or advisory lock, a PostgreSQL connection) before failing open.")
    tokenizer: str | None = Field(None, description="A real tokenizer for counts (o200k_base, cl100k_base; needs bpe-openai).")
    cache_bytes: int = Field(512 * 1024**2, ge=0,
                             description="Memory bound of the parsed-document cache for queries (0: none kept).")
    query_timeout: float = Field(5.0, gt=0, le=3600, allow_inf_nan=False,
                                 description="Seconds a grep or SQL query may run, reading its result included.")
    query_result_bytes: int = Field(64 * 1024**2, ge=1024**2,
                                    description="Largest SQL result a query stores as a derived artifact; a bigger "
                                                "one is refused with what to do, and its rows never pile up in memory.")
    api_tokens: dict[str, str | None] = Field(default_factory=dict,
                                              description="HTTP API tokens: token → namespace it is scoped to "
                                                          "(null: any). Required to serve off loopback.")

    @field_validator("limits")
    @classmethod
    def _limits_hold_a_reference(cls, limits: dict[str, int]) -> dict[str, int]:
        """Each limit holds a reference; its key is lower-cased, as tool names are looked up (a limit for
        `MyTool` was ignored: the lookup lower-cased the name, not the key)."""
        low = {tool: tokens for tool, tokens in limits.items() if tokens < MIN_LIMIT}
        if low:
            raise ValueError(f"{', '.join(f'{t}={n}' for t, n in low.items())}: {too_small(MIN_LIMIT)}")
        if "" in map(str.strip, limits):
            raise ValueError("a limit needs a tool name (OFFLOAD_LIMIT_ with nothing after it, or an empty key)")
        return {tool.lower(): tokens for tool, tokens in limits.items()}

    @model_validator(mode="after")
    def _aliases_name_budgets(self) -> "Settings":
        """An alias names a budget key (a default one, or one `limits` sets): one misspelt (`reed`) gave
        its tools the default budget, silently."""
        keys = {*DEFAULT_LIMITS, *(key.lower() for key in self.limits)}
        unknown = [f"{alias}={target}" for alias, target in self.aliases.items() if target.lower() not in keys]
        if unknown:
            raise ValueError(f"alias {', '.join(unknown)} names no budget: the keys are {', '.join(sorted(keys))} "
                             "(or set a limit of that name too)")
        return self

    @model_validator(mode="after")
    def _window_share_holds_a_reference(self) -> "Settings":
        cap = self.window_cap
        if cap is not None and cap < MIN_LIMIT:
            raise ValueError(f"window_tokens={self.window_tokens:,} × window_share={self.window_share} allows "
                             f"{cap} tokens a result: {too_small(MIN_LIMIT)} (is the window given in tokens?)")
        return self

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings):
        sources: list[PydanticBaseSettingsSource] = [init_settings, _ToolLimitEnv(settings_cls), env_settings]
        path = config_file()
        if path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
            _warn_unknown_keys(str(path), _mtime(path), frozenset(settings_cls.model_fields))
        return tuple(sources)

    def budget_key(self, tool: str) -> str:
        """The limits key a tool name maps to: itself if configured, an alias, a glob alias, or default."""
        name = tool.lower()
        if name in self.limits or name in DEFAULT_LIMITS:
            return name
        aliases = {**DEFAULT_ALIASES, **{k.lower(): v for k, v in self.aliases.items()}}
        if name in aliases:
            return aliases[name]
        for pattern, target in aliases.items():
            if any(ch in pattern for ch in "*?[") and fnmatch.fnmatchcase(name, pattern):
                return target
        return "default"

    @property
    def window_cap(self) -> int | None:
        """The most tokens one result may take of the window, when the window is known."""
        return int(self.window_tokens * self.window_share) if self.window_tokens else None

    def limit(self, key: str) -> int:
        """Budget in tokens for a limits key, capped by the window share when the window is known."""
        merged = {**DEFAULT_LIMITS, **{k.lower(): v for k, v in self.limits.items()}}
        value = merged.get(key.lower(), merged["default"])
        return min(value, self.window_cap) if self.window_cap else value

    def limit_for(self, tool: str) -> int:
        return self.limit(self.budget_key(tool))
