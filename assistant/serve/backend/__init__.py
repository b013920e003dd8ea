"""What a Realtime session runs behind: the `SessionBackend` contract and its real
implementation over the live loop (socket audio in/out, response ledger, manual turns)."""

__all__: list[str] = []
