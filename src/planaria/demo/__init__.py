"""Demonstration programs (the heat-in-a-rod main job)."""
