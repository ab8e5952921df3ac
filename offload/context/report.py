"""What a fit did, for the host to log or show: each action's strategy, the messages it touched (positions
in the list the caller passed), the artifacts it stored or named, and the tokens before and after."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# The strategies, in the order they are tried.
OFFLOAD = "offload"  # a. a result over the per-result cap became its reference
PLACEHOLDER = "placeholder"  # b. an older result became a one-line placeholder
DROP = "drop"  # c. a span of older groups became one stored artifact and a one-line note


@dataclass
class Action:
    strategy: str
    messages: list[int]  # positions in the caller's list
    artifact_ids: list[str]
    tokens_before: int
    tokens_after: int
    reused: bool = False  # the content was already stored: recognised by its hash, not stored again
    results: int = 1  # the tool results it changed: one message holds several (Anthropic's tool_result blocks)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ContextReport:
    api: str
    window_tokens: int
    budget: int
    tokens_before: int
    tokens_after: int = 0
    messages_before: int = 0
    messages_after: int = 0
    actions: list[Action] = field(default_factory=list)
    seconds: float = 0.0
    tokens_estimated: bool = True  # counted by the estimate, not a real tokenizer: the figures say "about"

    @property
    def changed(self) -> bool:
        return bool(self.actions)

    @property
    def strategies(self) -> list[str]:
        return list(dict.fromkeys(a.strategy for a in self.actions))

    @property
    def artifact_ids(self) -> list[str]:
        return list(dict.fromkeys(i for a in self.actions for i in a.artifact_ids))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(changed=self.changed, strategies=self.strategies, artifact_ids=self.artifact_ids)
        return data

    def summary(self) -> str:
        """One line for a log or a status bar."""
        about = "about " if self.tokens_estimated else ""
        head = (f"fit_context ({self.api}): {self.messages_before:,} messages, {about}{self.tokens_before:,} → "
                f"{self.tokens_after:,} tokens{' (estimated)' if self.tokens_estimated else ''} "
                f"(budget {self.budget:,} of a {self.window_tokens:,} window)")
        if not self.actions:
            return head + ": unchanged"
        parts = []
        for strategy, what in ((OFFLOAD, "result(s) offloaded to a reference"),
                               (PLACEHOLDER, "older result(s) replaced by a placeholder"),
                               (DROP, "span(s) dropped")):
            acts = [a for a in self.actions if a.strategy == strategy]
            if acts:
                if strategy == DROP:
                    parts.append(f"{len(acts):,} {what} ({sum(len(a.messages) for a in acts):,} messages)")
                else:  # results, not messages: three tool_result blocks of one message were "1 result(s)"
                    parts.append(f"{sum(a.results for a in acts):,} {what}")
        ids = self.artifact_ids
        named = ", ".join(ids[:4]) + (f" and {len(ids) - 4:,} more" if len(ids) > 4 else "")
        return f"{head}: {'; '.join(parts)}; artifacts {named}"


@dataclass
class FittedContext:
    """The result of `Offloader.fit_context`: the messages to send, and what was done to them."""

    messages: list[Any]
    report: ContextReport
