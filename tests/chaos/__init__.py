"""Chaos tests: real Redis, real role processes, a steady load, one fault per test."""
