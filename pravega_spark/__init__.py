"""Spark Python data source ``segstore``: batch and streaming reads and writes."""
