"""Experiment functions behind the notebooks: each trains (cached), evaluates (cached) and returns tidy tables.

A notebook calls one or two of these with its preset, plots the tables with `esreason_lib.paper.plots`, and records a
finding computed here. Nothing in this package draws or saves figures.
"""
