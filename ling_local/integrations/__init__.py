"""Bridges from other frameworks to the daemon (each behind an optional extra)."""
