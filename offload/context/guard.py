"""The context guard's entry point and memory: it validates a call, measures the messages, and remembers
what it learnt about each message object (tokens, roles, the variants it made, the spans it stored), so
an agent loop that passes the fitted list back pays dictionary lookups, not hashing or storing again.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import re
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from ..errors import ContextBudgetExceeded, InvalidArgument, OffloadError
from ..jsontext import loads
from ..store.records import utcnow
from .formats import FORMATS, Call, Format
from .measure import Part, count_message, split_parts
from .placeholders import Stored, note_text
from .report import ContextReport, FittedContext
from .strategies import Fitting

if TYPE_CHECKING:
    from ..offloader import Offloader

log = logging.getLogger("offload.context")

_FORGET_AFTER = 64  # fits: a message not seen for this many fits leaves the cache
_REAL_UP_TO = 1 << 20  # characters: a longer text is priced by the estimate alone (see `hold_to_real`)
_REAL_PASSES = 8  # times a fit runs again at most, as the real counts of what it kept come in
_WATCHED = ("content", "output", "tool_calls", "arguments", "input")
_REFERENCE_ID = re.compile(r"stored whole as (art_[a-z0-9]+)")


@dataclass
class Facts:
    """What the guard knows about one message object; cached by identity across fits."""

    msg: Any  # the object the caller passed (kept alive, so its id cannot be reused while cached)
    api: str
    data: dict  # the message as a dict
    held: tuple  # (key, value, items) watched for in-place changes
    size: int
    tokens: int
    role: str
    calls: list[Call]
    slots: list
    seen: int = 0
    checked: bool = False  # `tokens` holds the real tokenizers' count too (`ContextGuard.hold_to_real`)
    parts: dict[int, list[Part]] = field(default_factory=dict)
    variants: dict[tuple, Any] = field(default_factory=dict)

    def still_valid(self, msg: Any) -> bool:
        if self.msg is not msg:
            return False
        if not isinstance(msg, dict):  # an SDK object converted once: its identity is all we can check
            return True
        if len(msg) != self.size:
            return False
        for key, value, items in self.held:
            now = msg.get(key)
            if now is not value:
                return False
            if items is not None and (len(now) != len(items) or any(a is not b for a, b in zip(now, items))):
                return False
        return True


class ContextGuard:
    """One per Offloader: the caches that make steady-state fits cheap, and the strategies."""

    def __init__(self, off: "Offloader"):
        self._off = weakref.ref(off)  # the Offloader holds its guard (weakly keyed), not the other way
        self._facts: dict[int, Facts] = {}
        self._spans: dict[tuple, list[tuple[tuple, Facts, str]]] = {}  # (api, id(first)) → (span, note, id)
        # artifact id → what this guard stored, and the reference; None: no reference offload showed
        self._references: dict[str, Stored | None] = {}
        self._note_tokens: dict[str, int] = {}
        self._fits = 0
        self._lock = threading.Lock()

    @property
    def off(self) -> "Offloader":
        off = self._off()
        if off is None:
            raise RuntimeError("the Offloader of this context guard is gone")
        return off

    # -- entry point ------------------------------------------------------------------------

    def fit(self, messages: Sequence[Any], window_tokens: int, api: str = "openai", *,
            budget_ratio: float = 0.75, reserve_tokens: int = 0,
            on_report: Callable[[ContextReport], Any] | None = None, session: str | None = None) -> FittedContext:
        started = time.perf_counter()
        fmt = FORMATS.get(api)
        if fmt is None:
            raise InvalidArgument(f"unknown api {api!r}; expected one of {', '.join(FORMATS)}")
        if isinstance(window_tokens, bool) or not isinstance(window_tokens, int) or window_tokens <= 0:
            raise InvalidArgument(f"window_tokens must be a positive number of tokens (got {window_tokens!r})")
        if not 0 < budget_ratio <= 1:
            raise InvalidArgument("budget_ratio must be in (0, 1]")
        if isinstance(reserve_tokens, bool) or not isinstance(reserve_tokens, int) or reserve_tokens < 0:
            raise InvalidArgument(f"reserve_tokens must be a whole number of tokens, 0 or more "
                                  f"(got {reserve_tokens!r})")
        budget = int(window_tokens * budget_ratio) - reserve_tokens
        if budget <= 0:
            raise InvalidArgument(f"reserve_tokens ({reserve_tokens:,}) leaves no budget in "
                                  f"{budget_ratio:.0%} of a {window_tokens:,}-token window")
        if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, Iterable):
            raise InvalidArgument(f"messages must be a list of messages (got {type(messages).__name__})")
        with self._lock:
            self._fits += 1
        out = list(messages)
        facts = [self.facts(m, fmt) for m in out]
        total = sum(f.tokens for f in facts)
        report = ContextReport(api, window_tokens, budget, total, messages_before=len(out),
                               tokens_estimated=not self.off.counter.exact)
        cap = max(int(window_tokens * self.off.settings.window_share), 1)
        for passes in range(_REAL_PASSES + 1):
            if sum(f.tokens for f in facts) > budget:
                run = Fitting(self, fmt, out, facts, budget, cap, session, report)
                try:
                    out, facts = run.run()
                except ContextBudgetExceeded as exc:
                    exc.report = report  # what was stored before it gave up
                    log.warning("fit_context (%s): %s", api, exc)
                    raise
            if passes == _REAL_PASSES or not self.hold_to_real(facts):
                break
        report.tokens_after = sum(f.tokens for f in facts)
        report.messages_after = len(out)
        report.seconds = time.perf_counter() - started
        self._forget_old()
        level = logging.INFO if report.changed else logging.DEBUG
        if log.isEnabledFor(level):
            log.log(level, "%s", report.summary())
        if on_report is not None:
            on_report(report)
        return FittedContext(out, report)

    # -- what is known about a message --------------------------------------------------------

    def facts(self, msg: Any, fmt: Format) -> Facts:
        known = self._facts.get(id(msg))
        if known is not None and known.api == fmt.name and known.still_valid(msg):
            return self.touch(known)
        return self.remember(msg, fmt)

    def touch(self, facts: Facts) -> Facts:
        """Mark `facts` as seen by this fit, so the cache keeps it."""
        facts.seen = self._fits
        return facts

    def remember(self, msg: Any, fmt: Format, tokens: int | None = None) -> Facts:
        data = msg
        if not isinstance(msg, dict):
            dump = getattr(msg, "model_dump", None)
            if dump is None:
                raise InvalidArgument(f"a message must be a dict (or an SDK object with model_dump), "
                                      f"not {type(msg).__name__}")
            data = dump(mode="json", exclude_none=True)
        elif any(_is_sdk_object(v) or isinstance(v, list) and any(map(_is_sdk_object, v)) for v in msg.values()):
            # {"role": "assistant", "content": message.content}: the SDK's blocks inside a dict, as the
            # Anthropic docs write the loop; read (and stored) as the dicts they stand for
            data = {k: [_plain(x) for x in v] if isinstance(v, list) else _plain(v) for k, v in msg.items()}
        is_message = fmt.name != "openai-responses" or data.get("type") in (None, "message")  # not an item
        if is_message and not isinstance(data.get("role"), str):
            raise InvalidArgument(_no_role(data))
        watched = msg if isinstance(msg, dict) else data  # in-place changes show on the caller's dict
        held = tuple((k, watched[k], tuple(watched[k]) if isinstance(watched[k], list) else None)
                     for k in _WATCHED if k in watched)
        facts = Facts(msg, fmt.name, data, held, len(data), tokens if tokens is not None else self.count_message(data),
                      fmt.role(data), fmt.calls(data), fmt.results(data), seen=self._fits)
        self._facts[id(msg)] = facts
        return facts

    def hold_to_real(self, facts: list[Facts]) -> bool:
        """Raise the counts of `facts` not checked yet to the real tokenizers' (when installed and the
        counter is the estimate); whether any rose, so that the fit runs again with them.

        A conversation fitted by the estimate alone could be over the window: 60 turns of words in
        random syllables ("tubonama zegukuna") fitted to 23,825 tokens of a 32,000-token window were
        38,231 by cl100k_base. Only what a fit keeps is counted, once a message (its facts are cached),
        so the results a fit replaces are never tokenized; a text of over _REAL_UP_TO characters keeps
        its estimate (it is over any result's cap in windows up to ~3.5M tokens)."""
        measure = self.off.references.measure
        if self.off.counter.exact or not measure.installed:
            return False
        estimate = self.off.counter.count

        def count(text: str, kind: str = "text") -> int:
            guess = estimate(text, kind)
            return guess if len(text) > _REAL_UP_TO else measure.at_least(guess, text)

        rose = False
        for f in facts:
            if not f.checked:
                f.checked = True
                held = count_message(f.data, count)
                if held > f.tokens:
                    f.tokens, rose = held, True
        return rose

    def count_message(self, data: dict) -> int:
        """Tokens of one message: its JSON (media blocks priced apart) plus a per-message overhead."""
        return count_message(data, self.off.counter.count)

    def note_tokens(self, fmt: Format) -> int:
        """What a note costs at most: a long count, a chained span, and an id whose letters and digits
        alternate (the estimate charges every change of character class)."""
        if fmt.name not in self._note_tokens:
            note = fmt.note(note_text(1_000_000, "art_a2b3c4d5e6f7g2h3", True))
            self._note_tokens[fmt.name] = self.count_message(note)
        return self._note_tokens[fmt.name]

    def parts(self, facts: Facts, position: int) -> list[Part]:
        if position not in facts.parts:
            facts.parts[position] = split_parts(facts.slots[position].content, self.off.counter.count,
                                                 2 * self.off.settings.reference_tokens)
        return facts.parts[position]

    def _forget_old(self) -> None:
        """Drop what recent fits did not see, so the cache follows the live conversations only."""
        if self._fits % 16:
            return
        with self._lock:
            oldest = self._fits - _FORGET_AFTER
            for key, facts in list(self._facts.items()):
                if facts.seen < oldest:
                    del self._facts[key]
            for key, spans in list(self._spans.items()):
                alive = [s for s in spans if s[1].seen >= oldest]
                if alive:
                    self._spans[key] = alive
                else:
                    del self._spans[key]
            if len(self._references) > 20_000:
                self._references.clear()

    # -- storing ----------------------------------------------------------------------------

    def store(self, data: bytes, *, tool: str, args: Any, session: str | None) -> Stored:
        """Store `data` once: content already in the store (same sha256, this namespace) is named instead."""
        off = self.off
        found = off.store.find_by_content(hashlib.sha256(data).hexdigest(), off.namespace)
        if found is not None:
            if ttl := off.settings.ttl_days:  # it lives as long as one stored now: it is named from now on
                off.store.extend_expiry(found["id"], utcnow() + dt.timedelta(days=ttl))
            mine = self._references.get(found["id"])
            if mine is None:
                mine = self._references[found["id"]] = self._stored_reference(found["id"])
            # the reference stored with it, when this guard did not write it (another process's, or an
            # Offloader's before a restart): without it, the newest result became a bare placeholder
            return Stored(found["id"], found["kind"], found["bytes"], found["lines"],
                          mine.reference if mine is not None else None, True)
        ref = off.put(data, tool=tool, args=_args(args), session=session)
        stored = self._references[ref.artifact_id] = Stored(ref.artifact_id, ref.kind, ref.bytes, ref.lines,
                                                            ref.render(), False)
        return stored

    def own_reference(self, text: str) -> Stored | None:
        """The artifact behind a reference offload showed, so an older one can become a placeholder
        without storing anything: one this guard wrote, or one of its store's artifacts whose reference
        is this very text (a tool pack's, `@off.tool`'s, another process's guard: left whole, they had
        made the fit drop whole turns instead). Any other text is left alone."""
        match = _REFERENCE_ID.search(text, 0, 1000)
        if match is None:
            return None
        artifact_id = match.group(1)
        if artifact_id not in self._references:
            self._references[artifact_id] = self._stored_reference(artifact_id)
        stored = self._references[artifact_id]
        return stored if stored is not None and stored.reference == text else None

    def _stored_reference(self, artifact_id: str) -> Stored | None:
        try:
            row = self.off.store.get(artifact_id, self.off.namespace, touch=False)
        except OffloadError:  # not this namespace's, or no longer stored: a placeholder would name nothing
            return None
        shown = loads(row["reference"]).get("text") if row["reference"] else None
        return Stored(artifact_id, row["kind"], row["bytes"], row["lines"], shown, True) if shown else None

    def stored_span(self, api: str, span: tuple) -> tuple[int, Facts, str] | None:
        """The longest span dropped before that starts this one: (its length, its note's facts, its artifact)."""
        best = None
        for held, note, artifact_id in self._spans.get((api, id(span[0])), ()):
            if len(held) <= len(span) and all(a is b for a, b in zip(held, span)):
                if best is None or len(held) > best[0]:
                    best = (len(held), note, artifact_id)
        return best

    def remember_span(self, api: str, span: tuple, note: Facts, artifact_id: str) -> None:
        self._spans.setdefault((api, id(span[0])), []).append((span, note, artifact_id))

    def live_ids(self, artifact_ids: Iterable[str]) -> set[str]:
        """Those of `artifact_ids` the store still holds (see `Store.live_ids`)."""
        return self.off.store.live_ids(artifact_ids, self.off.namespace)


_LANGCHAIN_TYPES = ("human", "ai", "system", "tool", "function", "chat", "AIMessageChunk", "remove")


def _no_role(data: dict) -> str:
    """Why a message without a role is refused: every one of them was read as the user's (LangChain's
    messages, which say `type` instead, had their tool results go unrecognised and were dropped whole)."""
    if data.get("type") in _LANGCHAIN_TYPES:
        return ("a LangChain message has no role: convert the list with langchain_core.messages."
                "convert_to_openai_messages(messages) and fit it with api=\"openai\" (convert_to_messages "
                "turns the fitted list back)")
    keys = ", ".join(sorted(map(str, data))[:8])
    return f"a message needs a string `role` (user, assistant, system, tool); this one has keys {keys or 'none'}"


def _is_sdk_object(value: Any) -> bool:
    return not isinstance(value, (dict, list, str)) and callable(getattr(value, "model_dump", None))


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json", exclude_none=True) if _is_sdk_object(value) else value


def _args(args: Any) -> dict | None:
    if args is None or isinstance(args, dict):
        return args
    if isinstance(args, str):
        try:
            parsed = loads(args)
        except ValueError:
            return {"arguments": args}
        return parsed if isinstance(parsed, dict) else {"arguments": parsed}
    return {"arguments": args}
