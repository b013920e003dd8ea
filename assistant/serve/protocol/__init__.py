"""The Realtime wire protocol: client and server events, the JSON codec (GA and beta
spellings), session settings and the item/response framing."""

__all__: list[str] = []
