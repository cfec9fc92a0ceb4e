"""Checks for notebook 06."""

__all__: list[str] = []
