"""Where the loop's event-log entries go: the log itself, the diagnostic subscriber, and
the public output stream (through the speech gate).

Every entry is appended to the log and handed to ``on_entry``; the entries that announce
a public event (`assistant.loop.output.public_event`) reach ``on_output`` as that event,
except speech over a reply, which the :class:`~assistant.loop.speech_gate.SpeechGate`
holds until it is the user's turn.
"""

from __future__ import annotations

from assistant.loop import event_log as log
from assistant.loop.output import ConversationEvent, OutputCallback, public_event
from assistant.loop.speech_gate import SpeechGate
from assistant.loop.types import EntryCallback

__all__ = ["Publisher"]


class Publisher:
    """See the module docstring."""

    def __init__(self, on_entry: EntryCallback | None = None,
                 on_output: OutputCallback | None = None) -> None:
        self.entries: list[log.Entry] = []
        self._on_entry = on_entry
        self._on_output = on_output
        self._gate = SpeechGate()

    def publish(self, event: ConversationEvent) -> None:
        """A public event that is not in the log (a reply's text as it comes)."""
        if self._on_output is not None:
            self._on_output(event)

    def emit(self, entry: log.Entry, *, over_reply: bool = False) -> None:
        """Log ``entry`` and publish what it announces. ``over_reply``: a speech start
        while a reply holds the floor and interruptions pause (held until it counts)."""
        self.entries.append(entry)
        if self._on_entry is not None:
            self._on_entry(entry)
        if self._on_output is None:
            return
        for passed in self._gate.feed(entry, over_reply=over_reply):
            event = public_event(passed)
            if event is not None:
                self._on_output(event)
