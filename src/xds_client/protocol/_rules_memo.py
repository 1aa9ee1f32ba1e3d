"""The memo of verdicts: a message's verdict looked up by its serialized bytes.

Control planes repeat ``Any`` payloads (TLS contexts, filters) and costly sub-messages
(health checks, outlier detection) across resources, so their verdicts are kept by
``(type, bytes)``, bounded in entries and bytes. A verdict that compared a value with
``now`` is never kept. Each place in a checker that asks the memo for a sub-message
keeps its own hit rate and stops asking for a while where repeats are rare.
"""

from __future__ import annotations

from typing import Any

from ._rules_meanings import _GREW, _NOW_SEEN, _PASSED, Check, _broken, _RuleBrokenError

_MEMO_ENTRIES = 4096
_MEMO_BYTES = 1 << 20
"""Bounds of the memo: entries, and bytes of messages held (a message longer than a
sixteenth of it is not kept). Past either, it starts over."""

_MEMO_PROBATION = 32
_MEMO_MIN_HIT_RATIO = 2
_MEMO_PAUSE = 2048
"""Each place that checks such a sub-message asks the memo ``_MEMO_PROBATION`` times;
with fewer than one hit in ``_MEMO_MIN_HIT_RATIO`` it checks the next ``_MEMO_PAUSE``
ones directly (unique sub-messages, e.g. health checks naming their own host), then
tries again."""

Verdict = tuple[str, tuple[str, ...]]
"""``(reason, path segments)`` of a broken rule; :data:`_PASSED` when none is."""


class VerdictMemo:
    """Verdicts by ``(type or type URL, bytes)``, and the hit rates of the places that
    ask it (``states``)."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, bytes], Verdict] = {}
        self.size = 0  # bytes held
        self.states: list[list[int]] = []

    def remember(self, key: tuple[str, bytes], verdict: Verdict) -> None:
        size = len(key[1])
        if size > _MEMO_BYTES // 16:
            return
        if len(self.entries) >= _MEMO_ENTRIES or self.size + size > _MEMO_BYTES:
            self.entries.clear()
            self.size = 0
        self.entries[key] = verdict
        self.size += size

    def forget(self) -> None:
        """Drop every verdict, and what the places learnt of their hit rates."""
        self.entries.clear()
        self.size = 0
        for state in self.states:
            state[:] = [0, 0, 0]

    def through(self, kind: str, env: dict[str, Any], name: str) -> tuple[Check, list[int]]:
        """``(memoised, state)``: the checker of ``kind`` (``env[name]``) through the
        memo, and ``[lookups, hits, checks left without the memo]``, with which the
        memo turns itself off for a while where it does not pay (few repeats). The
        caller asks ``state[2]`` first (no extra call when off)."""
        memo = self.entries
        remember = self.remember
        state = [0, 0, 0]
        self.states.append(state)

        def memoised(value: Any, ctx: list[Any]) -> None:
            key = (kind, value.SerializePartialToString())
            seen = memo.get(key)
            state[0] += 1
            if seen is not None:
                state[1] += 1
                if seen is _PASSED:
                    return
                raise _broken(*seen)
            if state[0] >= _MEMO_PROBATION:
                if state[1] * _MEMO_MIN_HIT_RATIO < state[0]:
                    state[2] = _MEMO_PAUSE
                state[0] = state[1] = 0
            inner = [ctx[0], False, False]
            try:
                env[name](value, inner)
            except _RuleBrokenError as exc:
                if inner[_NOW_SEEN]:
                    ctx[_NOW_SEEN] = True
                else:
                    remember(key, (exc.reason, tuple(exc.segments)))
                raise
            if inner[_GREW]:  # the part shares the checked message's arena
                ctx[_GREW] = True
            if inner[_NOW_SEEN]:
                ctx[_NOW_SEEN] = True
            else:
                remember(key, _PASSED)

        return memoised, state
