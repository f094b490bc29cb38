"""Placeholder until the command lands (registered by app.py)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Nothing yet."""
