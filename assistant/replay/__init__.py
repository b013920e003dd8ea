"""The full stack on recorded audio (virtual clock or real time), scenario rendering, and
the plain-text report of a conversation and its metrics."""

__all__: list[str] = []
