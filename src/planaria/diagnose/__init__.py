"""Diagnosis of hung or failed jobs: state files, offline analysis, stack grouping."""
