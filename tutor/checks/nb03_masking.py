"""Checks for notebook 03."""

__all__: list[str] = []
