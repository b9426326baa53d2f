"""Helpers every app shares: the database clock, API plumbing, admin bases, logs.

The bottom layer: it imports none of jobs, runs, dispatch, ops or
scheduler_site (tools/import_graph.py checks it).
"""
