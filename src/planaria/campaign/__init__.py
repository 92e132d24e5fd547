"""Fault campaigns: random fault plans from a seed over the demo, an application and ABFT, each run classified.

:mod:`~planaria.campaign.plans` draws the plans, :mod:`~planaria.campaign.targets` runs and checks
them, :mod:`~planaria.campaign.classify` gives each run its class, :mod:`~planaria.campaign.report`
prints the table. ``planaria campaign`` (docs/campaign.md) puts them together.
"""
