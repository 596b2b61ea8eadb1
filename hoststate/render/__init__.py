"""Presentation: text primitives and one renderer per output kind."""
