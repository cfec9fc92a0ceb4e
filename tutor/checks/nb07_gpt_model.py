"""Checks for notebook 07."""

__all__: list[str] = []
