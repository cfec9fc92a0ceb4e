"""Checks for notebook 05."""

__all__: list[str] = []
