"""The live loop on asyncio: the pipeline that routes audio, transcripts, replies and
playback between the turn manager and the worker threads; its event log and metrics."""

__all__: list[str] = []
