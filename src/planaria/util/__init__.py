"""The bottom layer: small helpers (files, environment variables) every other layer may use.

Nothing here imports anything else from planaria.
"""
