"""Speech in and out of the loop: the listener (echo + VAD) and the reply voice (clauses
to Piper, with word timings)."""

__all__: list[str] = []
