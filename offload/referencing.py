"""The Reference of a stored result: its exact facts, and a preview, shape and hints fitted to a budget.

`ReferenceBuilder.analyse` takes the bytes already cut into the store's chunks (which count
characters, lines and invalid UTF-8 as they are cut) and detects the kind; `fit` fills in the preview so
that the whole rendered reference stays within its token budget, checked with real tokenizers when
they are installed (`Measure`, which also holds pages and passed-through results to theirs). `unstored`
is the last resort when even that fails.
"""

from __future__ import annotations

import functools
import hashlib
import math
from typing import Any, Callable

from .content import Detected, build_preview, detect, render_shape
from .content.lines import clip_to_budget
from .errors import StoreError
from .reference import Reference
from .results import Payload
from .store import new_id
from .store.chunking import Chunk, count_lines
from .tokens import TokenCounter, exact_tokenizer, surely_over, utf8_size

MIN_PREVIEW = 40  # tokens: below this a preview says nothing useful
# A preview shrunk by what its first attempt was over can land well under the target: the shape and the
# hints came on top of a first budget sized for the header alone, and each shrink keeps a margin. A
# nested JSON document at the default 800 tokens showed no item at all that way, with 38 tokens unused.
# Room of at least this many tokens is given back to the preview in another attempt (kept if it fits),
# never as big as a budget that went over with the same hints and shape, nor more than halfway to it.
GROW_ROOM = 15
_FITTED = ("preview", "truncated", "omitted", "shape", "extra", "shape_text", "items", "items_path", "hints")


class ReferenceBuilder:
    """Builds references within `reference_tokens` as `counter` (and the installed tokenizers) count."""

    def __init__(self, counter: TokenCounter, reference_tokens: int, grep_max_lines: int):
        self.counter = counter
        self.measure = Measure(counter)  # how a reference is held to `reference_tokens`
        self.reference_tokens = reference_tokens
        self.grep_max_lines = grep_max_lines

    @property
    def target(self) -> int:
        """Tokens a reference may take by the counter: the estimate may undercount by 10%."""
        return self.target_for(self.reference_tokens)

    def target_for(self, limit: int) -> int:
        """The target of a reference standing for a result over `limit` tokens: never more than the result
        was allowed (a small tool budget, or the window's share). Below ~250 tokens the header and the
        next calls alone are more: the reference then takes its short wording (see `clip`)."""
        tokens = min(self.reference_tokens, limit)
        return tokens if self.counter.exact else int(tokens * 0.9)

    def analyse(self, tool: str, data: bytes, payload: Payload | None, chunks: list[Chunk],
                on_detected: Callable[[Detected], None] | None = None) -> tuple[Reference, Detected]:
        """The reference for `data` with its exact facts (its preview is filled in by `fit`, its sha256 by
        the caller, which may be hashing meanwhile), and what `data` is.

        `chunks` (from `chunk_bytes`) carry the characters, newlines and invalid bytes of each chunk:
        detection, the reference's sizes, the token estimate and the store all reuse that one pass.
        `on_detected` learns what `data` is before the token estimate (the store's item index waits
        for it).
        """
        newlines = sum(chunk.newlines for chunk in chunks)
        lines = count_lines(len(data), newlines, data.endswith(b"\n"))
        detected = detect(data, tool, bad_bytes=sum(chunk.bad for chunk in chunks), lines=lines)
        if on_detected is not None:
            on_detected(detected)
        if payload is not None and payload.is_shell and payload.exit_code not in (None, 0):
            detected.memo["failed"] = True  # its stdout's last lines are where it stopped (`text_preview`)
        if detected.kind == "binary" and payload is not None and payload.text is not None:
            chars = len(payload.text)
        else:
            chars = sum(chunk.chars for chunk in chunks)
        tokens, sampled = self.counter.count_stored(data, chunks, detected.kind)
        ref = Reference(
            artifact_id=new_id("art_"), tool=tool, kind=detected.kind, content_type=detected.content_type,
            bytes=len(data), chars=chars, lines=lines, items=None,
            tokens=tokens, sha256="", preview="", truncated=True, notes=list(detected.notes),
            tokens_exact=self.counter.exact, tokens_sampled=sampled)
        return ref, detected

    def fit(self, ref: Reference, detected, data: bytes, target: int) -> None:
        """Fill in the preview, shape and hints so that the whole rendered reference fits `target` tokens.

        The preview is built in the counter's units; the whole text is checked with `measure`, which
        also runs the real tokenizers when they are installed, since the estimate can undercount (runs
        of brackets or repeated letters). Each retry shrinks the preview by what is still over, scaled
        by how much the counter undercounted the preview; the shape, then hints, give way after that.
        A JSON preview that fits but shows no item gets the room of the hints past two, then of the
        shape, then of the hint past one; a shrunk preview that leaves room is grown into it, twice at
        most (see GROW_ROOM).
        """
        measure = self.measure
        ref.preview, ref.omitted, ref.shape_text, ref.hints, ref.terse = "", "", "", [], False
        # The header alone is sized by the counter, not the real tokenizers (two encodes, ~0.5 ms): it is
        # prose, numbers and one id, which the estimate prices at or above both; the whole is checked below.
        # The preview's label and the sentence of what it leaves out come on top: sized here with this
        # result's own numbers, so the first preview usually fits (a second costs a whole rebuild: ~4 ms
        # of a 1 MB log's 14, when a fixed margin left the first 2-4 tokens over in 17 puts of 20).
        preview_budget = max(self._room(ref, target), MIN_PREVIEW)
        shape_form, max_hints = "full", None  # then "compact" (`render_shape`), then "" when it gives way
        too_big = math.inf  # the smallest preview budget that went over, with the hints and shape kept now
        # an attempt that fitted, while a bigger preview is tried (twice per layout at most): snapshot,
        # entries shown, tokens over (<= 0), budget
        fitted: tuple[dict, int | None, int, int] | None = None
        grows = 0
        richer: dict | None = None  # the attempt that fitted before hints or the shape gave way for an item
        for attempt in range(10):
            preview = build_preview(detected, data, preview_budget, self.counter.count,
                                    max_lines=self.grep_max_lines)
            ref.preview, ref.truncated, ref.omitted = preview.text, preview.truncated, preview.omitted
            ref.shape, ref.extra = preview.shape, dict(preview.extra)
            ref.shape_text = (render_shape(preview.shape, compact=shape_form == "compact")
                              if preview.shape and shape_form else "")
            ref.items = preview.extra.get("items")
            ref.items_path = preview.extra.get("items_path")
            results = ref.extra.pop("hint_results", {})
            hints = preview.hints if max_hints is None else preview.hints[:max_hints]
            ref.hints = [{"jmespath": h, "result": results.get(h)} for h in hints]
            text = ref.render()
            total = self.counter.count(text)
            # `measure` is at least the counter (the counter itself when it is a real tokenizer): only
            # when the counter says it fits can measure say otherwise
            undercounted = total <= target and not self.counter.exact
            if undercounted:
                total = measure(text)
            over, shows = total - target, preview.entries_shown
            if fitted is not None:  # the bigger preview, if it fits; else the one before it
                if over > 0:
                    too_big = min(too_big, preview_budget)
                    snapshot, shows, over, preview_budget = fitted
                    _restore(ref, snapshot)
                fitted = None
            if over <= 0:
                if preview.entries and not shows and (len(ref.hints) > 1 or ref.shape_text):
                    # A JSON preview that shows none of its items says less than one would (a nested API
                    # response at the default 800 tokens showed none beside its shape and four hints): the
                    # hints past two, then the shape (it describes every item; an item shows one), then
                    # the hint past one make room (a derived SQL result, its text in ~420 tokens beside
                    # its JSON, showed no row beside two hints). If that buys no item, the attempt before
                    # stands (`richer`).
                    richer = richer or _snapshot(ref)
                    if len(ref.hints) > 2 or (len(ref.hints) > 1 and not ref.shape_text):
                        kept = 2 if len(ref.hints) > 2 else 1
                        freed = self.counter.count(_hint_lines(ref.hints[kept:]))
                        max_hints = kept
                    else:
                        freed, shape_form = self._shape_gives_way(ref, shape_form)
                    preview_budget = max(preview_budget + freed - over - 5, MIN_PREVIEW)
                    too_big, grows = math.inf, 0
                    continue
                # never as big as a budget that went over, nor more than halfway to it: a JSON preview grows by
                # whole items, and the jump into all the room left can take one item too many
                grown = min(preview_budget - over - 5, too_big - 1,
                            preview_budget + (too_big - preview_budget) // 2 if too_big < math.inf else math.inf)
                if grows < 2 and attempt > 0 and ref.truncated and -over >= GROW_ROOM and grown > preview_budget:
                    # a preview shrunk by what an attempt was over, with margins, can leave room: grow into it
                    fitted, grows = (_snapshot(ref), shows, over, preview_budget), grows + 1
                    preview_budget = grown
                    continue
                if richer is not None and not shows:
                    _restore(ref, richer)
                return
            too_big = min(too_big, preview_budget)
            shown = measure(ref.preview) if undercounted else self.counter.count(ref.preview)
            ratio = min(1.0, self.counter.count(ref.preview) / shown) if shown else 1.0
            wanted = int((shown - over - 20) * ratio)
            if wanted < MIN_PREVIEW and preview_budget <= MIN_PREVIEW:
                # the preview is as small as is useful: the shape, then the hints make room, and the room
                # they leave goes to the preview (its first items say more than a long shape)
                if shape_form and ref.shape_text:
                    freed, shape_form = self._shape_gives_way(ref, shape_form)
                    wanted += freed
                elif len(ref.hints) > 1:
                    max_hints = len(ref.hints) - 1
                    wanted += self.counter.count(_hint_lines(ref.hints[-1:]))
                too_big, grows = math.inf, 0  # another layout: what went over with the old one may fit
            preview_budget = max(wanted, MIN_PREVIEW)
        if fitted is not None:  # out of attempts with a bigger preview tried and over: the one before
            _restore(ref, fitted[0])
            if fitted[1] or richer is None:
                return
        if richer is not None:
            _restore(ref, richer)
            return
        self.clip(ref, target)
        if ref.terse and not ref.preview:
            self._refill(ref, detected, data, target)

    def _shape_gives_way(self, ref: Reference, form: str) -> tuple[int, str]:
        """(tokens freed, the next form) when the shape gives way: the full one to its compact form, when
        that is shorter, then the compact one to none."""
        full = self.counter.count("Shape:\n" + ref.shape_text)
        if form == "full" and ref.shape:
            compact = render_shape(ref.shape, compact=True)
            if compact != ref.shape_text:
                return full - self.counter.count("Shape:\n" + compact), "compact"
        return full, ""

    def _refill(self, ref: Reference, detected: Detected, data: bytes, target: int) -> None:
        """A preview in the room the short wording left, if it is worth one (and fits)."""
        room = target - self.measure(ref.render()) - 10
        empty = (ref.preview, ref.truncated, ref.omitted)
        for _attempt in range(2):
            if room < MIN_PREVIEW:
                break
            preview = build_preview(detected, data, room, self.counter.count, max_lines=self.grep_max_lines)
            ref.preview, ref.truncated, ref.omitted = preview.text, preview.truncated, preview.omitted
            if all(line.startswith("…") or not line.strip(" []{},") for line in preview.text.splitlines()):
                break  # brackets and markers of what is left out say no more than the sentence saying so
            over = self.measure(ref.render()) - target
            if over <= 0:
                return
            room -= over + 10
        ref.preview, ref.truncated, ref.omitted = empty

    def clip(self, ref: Reference, target: int) -> None:
        """Last resort: cut the preview, then the stderr preview, to what the rest of the text leaves.

        When the full wording is over even without a preview (a budget of ~400 tokens and below), the
        hints and the shape go, then the reference takes its short wording (`Reference.terse`), and only
        then is stderr cut, into the room that leaves: stdout's preview, already cut to nothing, gets
        what is left after it (`_refill`), so an error on stderr keeps its place.
        """
        self._cut(ref, target, ("preview",))
        if self.measure(ref.render()) <= target:
            return
        ref.hints, ref.shape_text = [], ""
        if self.measure(ref.render()) <= target:
            return
        ref.terse = True  # before stderr is cut: the error it shows says more than the calls' explanations
        if not ref.preview:  # what was left out, in one sentence: all of it
            ref.omitted = "none of it is shown here"
        self._cut(ref, target, ("preview", "stderr"))

    def _cut(self, ref: Reference, target: int, names: tuple[str, ...]) -> None:
        """Cut each field in turn until the reference fits: by what it is over, again if the note that
        says so tipped it over."""
        measure = self.measure
        for name in names:
            whole = getattr(ref, name) or ""
            said = ref.omitted if name == "preview" else list(ref.notes)
            for _attempt in range(4):
                over = measure(ref.render()) - target
                if over <= 0:
                    return
                value = getattr(ref, name)
                if not value:
                    break
                kept = clip_to_budget(value, max(measure(value) - over - 10, 0), measure, whole_lines=True)
                note = f"{name} cut to {len(kept):,} of {len(whole):,} chars to fit the reference budget"
                setattr(ref, name, kept)
                if name == "preview":
                    ref.truncated = True
                    ref.omitted = f"{said}; {note}" if said else note
                else:
                    ref.stderr_truncated = True
                    # the short wording says "stderr (N bytes, stored whole as …): not shown" of an empty one
                    ref.notes = [*said, note] if kept or not ref.terse else said

    def _room(self, ref: Reference, target: int) -> int:
        """Tokens of `target` that the rendered `ref` leaves to its preview, by the counter."""
        around = self.counter.count(f"Preview — partial:\nlines 4–{ref.lines:,} ({ref.lines:,} lines, {ref.bytes:,} "
                                    f"bytes) not shown; line {ref.lines:,}: chars 16–118 (103 chars) not shown.")
        return target - self.counter.count(ref.render()) - around - 10

    def add_stderr(self, ref: Reference, tool: str, stderr: bytes, target: int) -> Reference:
        """Put the preview of a shell result's stderr on `ref` (stdout's, analysed, its preview not yet
        built), and return stderr's own reference: its `artifact_id` is set when it is to be stored
        whole (`truncated`).

        The room the rest of the reference leaves is shared: each stream takes what it needs up to half,
        and what one leaves, the other may take. A flat half of the target went to stderr before the
        header was counted, and stdout was left one line beside a stderr of 20 warnings.
        """
        ref.stderr, ref.stderr_bytes, ref.stderr_truncated = "", len(stderr), True
        ref.stderr_artifact_id = new_id("art_")  # named in the next calls when stored: it takes room
        room = self._room(ref, target)
        if room < 3 * MIN_PREVIEW:
            # a small budget: the reference will take its short wording (`clip`), and stderr, where the
            # error is, the room that leaves (sized for the full wording, it kept an omission marker)
            ref.terse = True
            room = max(room, self._room(ref, target) - MIN_PREVIEW // 2)
            ref.terse = False
        half = room // 2
        stderr_need = half + 1 if not self.counter.exact and surely_over(len(stderr), half) else (
            self.counter.count(stderr, "text") + 10)
        stdout_need = ref.tokens + 10 if ref.bytes else 0
        share = stderr_need if stderr_need <= half else max(half, room - stdout_need)
        stderr_ref = self.stderr_preview(tool, stderr, share, max(share, MIN_PREVIEW))
        if stderr_ref.truncated:
            stderr_ref.artifact_id = ref.stderr_artifact_id  # stored whole with the result, which names it
        ref.stderr, ref.stderr_truncated = stderr_ref.preview, stderr_ref.truncated
        ref.stderr_artifact_id = stderr_ref.artifact_id
        ref.stderr_grep = stderr_ref.extra.get("error_grep")
        return stderr_ref

    def stderr_preview(self, tool: str, stderr: bytes, share: int, cap: int) -> Reference:
        detected = detect(stderr, None)
        budget = max(share, MIN_PREVIEW)
        for _attempt in range(4):
            preview = build_preview(detected, stderr, budget, self.counter.count)
            shown = self.measure(preview.text)
            if shown <= cap:
                break
            # the counter undercounted this text: scale its budget down by how much
            ratio = min(1.0, self.counter.count(preview.text) / shown) if shown else 1.0
            budget = max(int((cap - 10) * ratio), 1)
        text = detected.text or ""
        return Reference(
            artifact_id=None, tool=tool + ":stderr", kind=detected.kind, content_type=detected.content_type,
            bytes=len(stderr), chars=len(text), lines=count_lines(len(stderr), stderr.count(b"\n"),
                                                                  stderr.endswith(b"\n")),
            items=None, tokens=self.counter.count(text, "text"), sha256=hashlib.sha256(stderr).hexdigest(),
            preview=preview.text, truncated=preview.truncated, omitted=preview.omitted,
            tokens_exact=self.counter.exact, extra=dict(preview.extra))

    def unstored(self, tool: str, result: Any, exc: Exception, limit: int | None = None) -> Reference | str:
        """Last resort when even building a reference failed: a bounded head+tail, plainly NOT stored,
        within the reference budget (and the tool's `limit`, when smaller)."""
        try:
            if isinstance(result, (bytes, bytearray, memoryview)):
                data = bytes(result)
            else:
                try:
                    text = result if isinstance(result, str) else repr(result)
                except Exception:  # noqa: BLE001 - no text to show, nor sizes to state: say just that
                    return (f"[offload] The result of `{tool}` (a {type(result).__qualname__} object) could not "
                            f"be rendered as text, neither as JSON nor by repr(), and was NOT stored "
                            f"({reason(exc)}). Nothing of it is shown.")
                data = text.encode("utf-8", errors="surrogatepass")
            text = data.decode("utf-8", errors="replace")
            target = self.target_for(limit) if limit is not None else self.target
            try:
                tokens = self.counter.count(text)
            except Exception:  # noqa: BLE001 - a count is not worth failing the last resort
                tokens = len(data)
            ref = Reference(
                artifact_id=None, tool=tool, kind="text", content_type="text/plain", bytes=len(data),
                chars=len(text), lines=count_lines(len(data), data.count(b"\n"), data.endswith(b"\n")),
                items=None, tokens=tokens, sha256=hashlib.sha256(data).hexdigest(), preview="", truncated=True,
                stored=False, error=reason(exc), tokens_exact=self.counter.exact)
            if b"\x00" in data[:8192]:
                ref.preview, ref.omitted = "[binary data: not shown]", f"all {len(data):,} bytes not shown"
                return ref
            keep = min(len(text), target * 4)
            while True:
                if keep >= len(text):
                    ref.preview, ref.truncated, ref.omitted = text, False, ""
                else:
                    head, tail = text[: keep - keep // 2], text[len(text) - keep // 2:] if keep // 2 else ""
                    gap = len(text) - len(head) - len(tail)
                    ref.preview = f"{head}\n… [{gap:,} characters not shown] …\n{tail}"
                    ref.truncated = True
                    ref.omitted = (f"characters {len(head):,}–{len(head) + gap - 1:,} ({gap:,} characters) "
                                   "not shown")
                if self.measure(ref.render()) <= target or keep == 0 and ref.terse:
                    return ref
                if keep == 0:  # the full wording alone is over (a long tool name and reason): the short one
                    ref.terse, keep = True, min(len(text), target * 4)
                else:
                    keep //= 2
        except Exception:  # noqa: BLE001 - truly the last resort
            return f"[offload] The result of `{tool}` could not be processed and was NOT stored ({reason(exc)})."


REASON_CHARS = 300


def reason(exc: BaseException) -> str:
    """Why a result was not stored, in one line of at most REASON_CHARS (a store error names its path,
    which may be long)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, OSError) and getattr(exc, "errno", None) == 28:
        return "the disk is full"
    text = text if isinstance(exc, StoreError) else f"{type(exc).__name__}: {text}"
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 1] + "…"


class Measure:
    """Tokens of a text the model reads, for holding it to its budget.

    With a configured tokenizer, that count. Otherwise the estimate, and also every real tokenizer that
    is installed (bpe-openai): the estimate can undercount repetitive text several times over (runs of
    brackets or repeated letters), and dense CJK or combining marks by a third.

    Called, it runs the tokenizers on every text: a reference is small, so checking it exactly costs well
    under a millisecond. `within(budget)` counts pages and passed-through results, which are larger: it
    runs them on every text that could be over its budget by a real count, so that what the model reads
    fits by them whatever the text (see `within`). Without bpe-openai both are the estimate, and the
    budget rests on it.
    """

    def __init__(self, counter: TokenCounter):
        self.counter = counter

    @functools.cached_property
    def _installed(self) -> tuple[Callable[[str], int], ...]:
        # loaded on the first text that needs them, not at construction: a tokenizer costs ~0.4 s and
        # ~90-140 MB (both ~175 MB), and a process whose results and pages have no more bytes than their
        # budgets have tokens never needs them
        found = []
        for name in ("o200k_base", "cl100k_base"):
            try:
                tokenize = exact_tokenizer(name)
            except Exception:  # noqa: BLE001 - an optional dependency of unknown version: the estimate remains
                tokenize = None
            if tokenize is not None:
                found.append(tokenize)
        return tuple(found)

    @property
    def installed(self) -> bool:
        """Whether a real tokenizer is installed (loading them on first use)."""
        return bool(self._installed)

    def __call__(self, text: str) -> int:
        if self.counter.exact:
            return self.counter.count(text)
        return self.at_least(self.counter.count(text), text)

    def at_least(self, estimate: int, text: str) -> int:
        """The larger of `estimate` and every installed tokenizer's count of `text`."""
        try:
            return max(estimate, *(tokenize(text) for tokenize in self._installed))
        except Exception:  # noqa: BLE001 - e.g. lone surrogates the tokenizer refuses
            return estimate

    def within(self, budget: int, real: int | None = None) -> Callable[..., int]:
        """`count(text, estimate=None)`: tokens of `text` held to `budget` by the estimate (given, or
        counted) and to `real` (`budget` unless given) by the real tokenizers, in `budget`'s units.

        The estimate alone when it is over `budget`, or when `text` has at most `real` UTF-8 bytes: a
        token of o200k_base or cl100k_base stands for one byte or more, so no real count of it can be
        over `real`. Else the larger of the estimate and the real count scaled by budget / real, so that
        a caller comparing it with `budget` holds the real count to `real` (a page is built to 0.9 of
        its budget by the estimate; the real count is held to all of it).

        Every text of more bytes is counted, because no cheaper test tells the ones the estimate prices
        far too low: 8,000-character windows of gettext catalogues came to 0.60 (Kinyarwanda), 0.68
        (Basque) and 0.77 (an English list of place names) of the larger real count, random syllables
        ("tubonama zegukuna") 0.62, "  kkkk" repeated 0.44; pages of the last were 6,955 tokens against
        4,000, a passed-through result 7,746. Counting a page of 16,000 characters by both tokenizers
        takes ~2.4 ms, beside the ~4 ms its building takes.
        """
        counter = self.counter
        if counter.exact:
            return lambda text, estimate=None: counter.count(text) if estimate is None else estimate
        real = budget if real is None else real

        def count(text: str, estimate: int | None = None) -> int:
            if estimate is None:
                estimate = counter.count(text)
            if estimate > budget or utf8_size(text) <= real:
                return estimate
            exact = self.at_least(estimate, text)
            return estimate if exact == estimate else max(estimate, -(-exact * budget // real))

        return count


def _snapshot(ref: Reference) -> dict[str, Any]:
    """What `fit` sets on a reference, to go back to an attempt that fitted."""
    return {name: getattr(ref, name) for name in _FITTED}


def _restore(ref: Reference, snapshot: dict[str, Any]) -> None:
    for name, value in snapshot.items():
        setattr(ref, name, value)


def _hint_lines(hints: list[dict[str, Any]]) -> str:
    """About what these hints take in the rendered reference: the room they give back when left out."""
    return "\n".join(f"  {hint['jmespath']}  → {hint.get('result')}" for hint in hints)
