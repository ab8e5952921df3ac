"""The strategies, tried in order until the conversation fits its budget:

a. a result over the per-result cap (window_share of the window) becomes its reference; when the most
   recent turn alone is still over the budget (parallel calls, each under the cap), its results share
   what the turn's other messages leave, and those over their share become references too, the largest
   first, one at a time until the turn fits;
b. older results, oldest first, become one-line placeholders naming their artifact;
c. the oldest groups after the first user message are dropped as one span, stored as one artifact (the
   messages as JSON) and named by a one-line note in their place; the first user message goes last,
   with as few groups after it as make room;
d. ContextBudgetExceeded, with the sizes, when the system prompt and the most recent turn alone do not fit.
A group (an assistant message with its calls and all their results, or a user message) is never split.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..errors import ContextBudgetExceeded
from ..results import to_payload
from .formats import ASSISTANT, RESULT, SYSTEM, USER, Call, Format
from .measure import OVERHEAD, Part, dumps, is_offload_text
from .placeholders import Stored, block_placeholder, note_text, text_placeholder
from .report import DROP, OFFLOAD, PLACEHOLDER, Action, ContextReport

if TYPE_CHECKING:
    from .guard import ContextGuard, Facts

MIN_REPLACE = 160  # tokens: a smaller result part is not worth a placeholder (~80 tokens itself)
_SPAN_TOOL = "fit_context"


class Fitting:
    """One fit in progress: the working list (1:1 with the caller's until a span is dropped)."""

    def __init__(self, guard: "ContextGuard", fmt: Format, out: list, facts: "list[Facts]", budget: int, cap: int,
                 session: str | None, report: ContextReport):
        self.guard, self.fmt, self.out, self.facts = guard, fmt, out, facts
        self.budget, self.cap, self.session, self.report = budget, cap, session, report
        self.total = sum(f.tokens for f in facts)
        self._looked_up = False  # whether the artifacts of the cached variants were looked up (`_still_stored`)
        self._live: set[str] = set()  # those found stored, and the artifacts of the variants made in this fit
        self.head = 0
        while self.head < len(facts) and facts[self.head].role == SYSTEM:
            self.head += 1
        self.groups = group(facts, self.head)
        # each result's call: the nearest one before it with its id (some providers reuse "call_0")
        self.calls: dict[tuple[int, Any], Call] = {}
        latest: dict[Any, Call] = {}
        for i, f in enumerate(facts):
            latest.update((c.call_id, c) for c in f.calls)
            self.calls.update(((i, slot.call_id), latest[slot.call_id]) for slot in f.slots if slot.call_id in latest)

    def fits(self) -> bool:
        return self.total <= self.budget

    def last(self) -> tuple[int, int]:
        """The most recent turn: the last group (empty when the list is all system prompt)."""
        return self.groups[-1] if self.groups else (len(self.out), len(self.out))

    def run(self) -> tuple[list, list[Facts]]:
        last = self.last()
        results = [i for i, f in enumerate(self.facts) if f.slots]
        for i in results:  # a. over the cap: the reference
            if self.fits():
                return self.out, self.facts
            if self.facts[i].tokens > self.cap:
                self._replace(i, OFFLOAD, ("offload", self.cap), lambda facts, i=i: self._offload(facts, i, self.cap))
        if self.fits():
            return self.out, self.facts
        self._share_latest(last)
        self._check_possible()
        for i in results:  # b. older results: a one-line placeholder
            if self.fits() or i >= last[0]:
                break
            self._replace(i, PLACEHOLDER, ("placeholder",), lambda facts, i=i: self._placeholder(facts, i))
        if not self.fits():  # c. older groups: dropped as one stored span
            self._drop()
        if not self.fits():  # d. only a note the estimate undercounted can still get here
            raise self._exceeded(self.total)
        return self.out, self.facts

    # -- a and b ----------------------------------------------------------------------------

    def _share_latest(self, last: tuple[int, int]) -> None:
        """a, again, for the most recent turn alone over the budget while none of its results is over the
        cap (parallel calls): its results share what the turn's other messages leave (and a note, when
        older groups may have to go), and the ones over their share become references, the largest
        first; if that is not enough, one-line placeholders (b), the largest first, which also replace
        references step a wrote."""
        reserve = self.guard.note_tokens(self.fmt) if self.groups and self.groups[0] != last else 0

        def needed() -> int:
            return self._tokens(0, self.head) + self._tokens(*last) + reserve

        if needed() <= self.budget:
            return
        holders = [i for i in range(*last) if self.facts[i].slots]
        slots = sum(len(self.facts[i].slots) for i in holders)
        if not slots:
            return
        others = needed() - sum(self.facts[i].tokens for i in holders)
        share = (self.budget - others) // slots - OVERHEAD
        # slot by slot, the largest first, until the turn fits: parallel results often share one message
        # (Anthropic's tool_result blocks), and the message's every slot over its share gave way at once
        sizes = {(i, position): sum(p.tokens for p in self.guard.parts(self.facts[i], position))
                 for i in holders for position in range(len(self.facts[i].slots))}
        for i, position in sorted(sizes, key=lambda slot: -sizes[slot]) if share > 0 else ():
            if needed() <= self.budget:
                return
            self._replace(i, OFFLOAD, ("offload", share, position),
                          lambda facts, i=i, position=position: self._offload(facts, i, share, position))
        for i in sorted(holders, key=lambda i: -self.facts[i].tokens):
            if needed() <= self.budget:
                return
            self._replace(i, PLACEHOLDER, ("placeholder",), lambda facts, i=i: self._placeholder(facts, i))

    def _replace(self, i: int, strategy: str, key: tuple, build: Callable[[Facts], Any]) -> None:
        old = self.facts[i]
        if key not in old.variants or not self._still_stored(old.variants[key]):
            old.variants[key] = build(old)  # again when the artifacts it named were deleted, evicted, expired
            if old.variants[key] is not None:
                self._live.update(old.variants[key][1])
        variant = old.variants[key]
        if variant is None:
            return
        new_facts, artifact_ids, reused, results = variant
        self.guard.touch(new_facts)
        self.out[i], self.facts[i] = new_facts.msg, new_facts
        self.total += new_facts.tokens - old.tokens
        self.report.actions.append(Action(strategy, [i], list(artifact_ids), old.tokens, new_facts.tokens, reused,
                                          results))

    def _still_stored(self, variant: Any) -> bool:
        """Whether every artifact a cached variant (facts, artifact ids, reused, results) names is still
        there: a long-running agent's store may have evicted, deleted or expired one since the variant was made.
        The artifacts of every variant this fit may reuse are looked up at once, on the first ask."""
        if variant is None or not variant[1]:
            return True
        if not self._looked_up:
            cached = {aid for f in self.facts for v in f.variants.values() if v is not None for aid in v[1]}
            self._live.update(self.guard.live_ids(cached))
            self._looked_up = True
        return set(variant[1]) <= self._live

    def _tool(self, i: int, call_id: str | None) -> tuple[str, Any]:
        call = self.calls.get((i, call_id))
        return (call.tool, call.args) if call is not None else ("tool", None)

    def _offload(self, facts: Facts, i: int, cap: int, only: int | None = None):
        """a: each slot over `cap` (or the slot at `only`) shares it among its parts in proportion to
        their size."""
        count = self.guard.off.counter.count
        contents, ids, reused = {}, [], True
        for position, slot in enumerate(facts.slots):
            if only is not None and position != only:
                continue
            parts = self.guard.parts(facts, position)
            if sum(p.tokens for p in parts) <= cap:
                continue
            tool, args = self._tool(i, slot.call_id)
            texts = {k: p for k, p in enumerate(parts) if p.kind == "text"}
            blocks = {k: p for k, p in enumerate(parts) if p.kind == "block"}
            media = sum(p.tokens for p in blocks.values())
            new = {}
            # the blocks alone over the cap: the largest give way until the rest fit (all of them did,
            # and four screenshots went where three fitted)
            for k, p in sorted(blocks.items(), key=lambda pair: -pair[1].tokens):
                if media <= cap:
                    break
                stored = self._store_block(p.value, tool, args)
                new[k] = block_placeholder(tool, p.value, stored)
                media += count(new[k]) + OVERHEAD - p.tokens
                ids.append(stored.artifact_id)
                reused &= stored.reused
            room = max(cap - media, 0)
            for k, share in _shares(texts, room).items():
                p = parts[k]
                stored = self._store_text(p.value, tool, args)
                reference = stored.reference
                if reference is None or count(reference) > share:
                    reference = text_placeholder(tool, stored)
                new[k] = reference
                ids.append(stored.artifact_id)
                reused &= stored.reused
            if new:
                contents[position] = self._rebuild(slot.content, parts, new)
        return self._variant(facts, contents, ids, reused)

    def _placeholder(self, facts: Facts, i: int):
        """b: every part of the result worth it becomes a one-line placeholder."""
        contents, ids, reused = {}, [], True
        for position, slot in enumerate(facts.slots):
            parts = self.guard.parts(facts, position)
            tool, args = self._tool(i, slot.call_id)
            new = {}
            for k, p in enumerate(parts):
                if p.tokens < MIN_REPLACE:
                    continue
                if p.kind == "kept":  # offload's own text: a reference this guard wrote gives way
                    stored = self.guard.own_reference(p.value) if isinstance(p.value, str) else None
                    if stored is not None:
                        new[k] = text_placeholder(tool, stored)
                        ids.append(stored.artifact_id)
                    continue
                if p.kind == "text":
                    stored = self._store_text(p.value, tool, args)
                    new[k] = text_placeholder(tool, stored)
                else:
                    stored = self._store_block(p.value, tool, args)
                    new[k] = block_placeholder(tool, p.value, stored)
                ids.append(stored.artifact_id)
                reused &= stored.reused
            if new:
                contents[position] = self._rebuild(slot.content, parts, new)
        return self._variant(facts, contents, ids, reused)

    def _variant(self, facts: Facts, contents: dict, ids: list[str], reused: bool):
        if not contents:
            return None
        data = self.fmt.with_results(facts.data, contents)
        return self.guard.remember(data, self.fmt), tuple(ids), reused, len(contents)

    def _rebuild(self, content: Any, parts: list[Part], new: dict[int, str]) -> Any:
        if isinstance(content, str):
            return new[0]
        out = list(content)
        for k, text in new.items():
            block = content[k]
            out[k] = {**block, "text": text} if isinstance(parts[k].value, str) else self.fmt.text_block(text)
        return out

    def _store_text(self, text: str, tool: str, args: Any) -> Stored:
        return self.guard.store(to_payload(text).data, tool=tool, args=args, session=self.session)

    def _store_block(self, block: dict, tool: str, args: Any) -> Stored:
        return self.guard.store(dumps(block), tool=tool, args=args, session=self.session)

    # -- c and d ----------------------------------------------------------------------------

    def _pinned(self, last: tuple[int, int]) -> tuple[int, int] | None:
        """The first user message's group: kept unless nothing else can make room."""
        first = self.groups[0] if self.groups else None
        if first is None or first == last or self.facts[first[0]].role != USER:
            return None
        return first

    def _tokens(self, start: int, end: int) -> int:
        return sum(f.tokens for f in self.facts[start:end])

    def _check_possible(self) -> None:
        """d, before anything is stored for b or c: the system prompt and the most recent turn alone."""
        needed = self._tokens(0, self.head) + self._tokens(*self.last())
        if needed > self.budget:
            raise self._exceeded(needed)

    def _exceeded(self, needed: int) -> ContextBudgetExceeded:
        last = self.last()
        system, turn = self._tokens(0, self.head), self._tokens(*last)
        note = needed - system - turn
        about = "about " if self.report.tokens_estimated else ""  # the estimate's figures say they are one
        with_note = f"; the note naming what was dropped: {about}{note:,}" if note > 0 else ""
        if any(self.facts[i].slots for i in range(*last)):
            why = (f"Results over {self.cap:,} tokens are already references: shrink the turn's own messages, or "
                   "pass a larger window_tokens or budget_ratio.")
        elif other := _other_api([self.facts[i].data for i in range(*last)], self.fmt.name):
            why = (f"The turn holds no tool result of {self.fmt.name} messages, and its messages look like "
                   f'{other}\'s: pass api="{other}".')
        else:  # "already references" of a turn with none: a pasted text
            why = ("The turn holds no tool result to make a reference of (its messages are sent as they are): "
                   "shrink them, or pass a larger window_tokens or budget_ratio.")
        return ContextBudgetExceeded(needed, self.budget, (
            f"System prompt: {about}{system:,} tokens; most recent turn: {about}{turn:,} tokens in "
            f"{last[1] - last[0]} message(s){with_note}; window {self.report.window_tokens:,}. {why}"))

    def _drop(self) -> None:
        """c: the oldest groups after the first user message, as few as make room, as one span (again, with
        the note as its first message, in the rare case the note came out longer than its estimate)."""
        note_cost = self.guard.note_tokens(self.fmt)
        while not self.fits():
            last = self.last()
            pinned = self._pinned(last)
            candidates = [g for g in self.groups if g != last and g != pinned]
            start = candidates[0][0] if candidates else last[0]
            end, freed = start, 0
            for group_start, group_end in candidates:
                freed += self._tokens(group_start, group_end)
                end = group_end
                if self.total - freed + note_cost <= self.budget:
                    break
            if self.total - freed + note_cost > self.budget and pinned is not None:
                # the last resort: the first user message goes too (its group is the first), and then only
                # as many groups after it as still make room (all of them went, with it)
                start, end = pinned
                freed = self._tokens(*pinned)
                for group_start, group_end in candidates:
                    if self.total - freed + note_cost <= self.budget:
                        break
                    freed += self._tokens(group_start, group_end)
                    end = group_end
            if end <= start or (end - start == 1 and is_offload_text(self.facts[start].data.get("content"))):
                return  # nothing left to drop but a note
            self._store_span(start, end)
            self.groups = group(self.facts, self.head)

    def _store_span(self, start: int, end: int) -> None:
        guard, fmt = self.guard, self.fmt
        key = tuple(self.out[start:end])
        before = self._tokens(start, end)
        known = guard.stored_span(fmt.name, key)
        if known is not None and not guard.live_ids([known[2]]):
            known = None  # its artifact was deleted, evicted or expired: the span is stored again, whole
        if known is not None and known[0] == len(key):  # the very same span as before: its note again
            _length, note_facts, artifact_id = known
            reused = True
        else:
            span = [f.data for f in self.facts[start:end]]
            if known is not None:  # a span dropped before starts this one: its note stands for it
                span = [known[1].data] + span[known[0]:]
            chained = is_offload_text(span[0].get("content")) and span[0].get("role") == "user"
            stored = guard.store(dumps(span, indent=True), tool=_SPAN_TOOL, args={"messages": len(span)},
                                 session=self.session)
            artifact_id, reused = stored.artifact_id, stored.reused
            note_facts = guard.remember(fmt.note(note_text(len(span), artifact_id, chained)), fmt)
            guard.remember_span(fmt.name, key, note_facts, artifact_id)
        guard.touch(note_facts)
        self.out[start:end] = [note_facts.msg]
        self.facts[start:end] = [note_facts]
        self.total += note_facts.tokens - before
        self.report.actions.append(Action(DROP, list(range(start, end)), [artifact_id], before,
                                          note_facts.tokens, reused))


def _shares(texts: dict[int, Part], room: int) -> dict[int, int]:
    """Which text parts give way, largest first, and each one's share of the room the kept ones leave.

    Blocks of one result share its budget in proportion to their size: the largest are offloaded until
    the rest fit whole beside a useful reference for each, and those references split what is left
    in proportion to the sizes of the parts they stand for.
    """
    kept = sum(p.tokens for p in texts.values())
    offloaded: list[int] = []
    for k in sorted(texts, key=lambda k: -texts[k].tokens):
        if kept <= room - MIN_REPLACE * len(offloaded):
            break
        offloaded.append(k)
        kept -= texts[k].tokens
    weight = sum(texts[k].tokens for k in offloaded)
    left = max(room - kept, 0)
    return {k: left * texts[k].tokens // weight for k in offloaded} if weight else {}


def group(facts: "list[Facts]", head: int) -> list[tuple[int, int]]:
    """Split messages after the system head into groups, as [start, end) ranges.

    A user message is a group; an assistant message (with the assistant-side items that follow it before
    any result: reasoning, more calls) and all the results of its calls are one group. A result that
    answers a call of an earlier group merges everything in between, so no cut ever separates a call
    from its result, whatever the input's order.
    """
    groups: list[list] = []  # [start, end, kind, pending call ids, has results]
    owner: dict[Any, int] = {}
    for i in range(head, len(facts)):
        f = facts[i]
        current = groups[-1] if groups else None
        if f.role == RESULT and current is not None:
            current[1], current[4] = i + 1, True
            for slot in f.slots:
                g = owner.get(slot.call_id)
                if g is not None and g < len(groups) - 1:
                    merged = groups[g]
                    for later in groups[g + 1:]:
                        merged[3] |= later[3]
                    merged[1], merged[4] = i + 1, True
                    del groups[g + 1:]
                    owner.update({k: g for k, v in owner.items() if v > g})
                groups[-1][3].discard(slot.call_id)
        elif (f.role == ASSISTANT and current is not None and current[2] == ASSISTANT
              and (not current[4] or current[3])):
            current[1] = i + 1
        else:
            groups.append([i, i + 1, ASSISTANT if f.role in (ASSISTANT, RESULT) else USER, set(), False])
        for call in f.calls:
            owner[call.call_id] = len(groups) - 1
            groups[-1][3].add(call.call_id)
    return [(g[0], g[1]) for g in groups]


# The block types that give away the API a message list was written for (`_other_api`)
_API_OF_BLOCKS = {"tool_result": "anthropic", "tool_use": "anthropic", "function_call_output": "openai-responses",
                  "function_call": "openai-responses"}


def _other_api(messages: list[dict], api: str) -> str | None:
    """The API whose tool results `messages` (as dicts: `Facts.data`) hold, when not `api`'s: an Anthropic
    list fitted as OpenAI's had its 174,000-token tool_result said to be a reference already."""
    for data in messages:
        blocks = data.get("content") if isinstance(data.get("content"), list) else []
        for item in [data, *blocks]:
            other = _API_OF_BLOCKS.get(item.get("type")) if isinstance(item, dict) else None
            if other and other != api:
                return other
    return None
