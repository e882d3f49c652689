"""The run store: one directory per (kind, config hash), its identity, and the integrity of what it holds."""
