"""Waiting for dispatchers' replies: one reader per gateway process, on a single Redis or a Redis Cluster.

Imports: bus.
"""
