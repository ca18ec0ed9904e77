"""Ballast."""
