"""Who holds the floor: the turn-taking events and the pure turn-manager state machine."""

__all__: list[str] = []
