"""Checks for notebook 08."""

__all__: list[str] = []
