"""The record's integrity on disk: the single-writer lock (lock.py), the recoverable replace of a record
or of a group inside one (replace.py) and the link / leftover checks (leftovers.py)."""
