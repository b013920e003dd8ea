"""The full stack on recorded audio (virtual clock or real time), and scenario rendering."""

__all__: list[str] = []
