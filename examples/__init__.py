"""Worked examples built on airlock; they live beside the library, not inside it."""
