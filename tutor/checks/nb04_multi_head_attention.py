"""Checks for notebook 04."""

__all__: list[str] = []
