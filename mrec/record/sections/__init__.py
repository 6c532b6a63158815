"""The sections of a record other than the trajectory: documents (meta, status, method), frame-shaped
groups (frame/, system/), fixed arrays, observables, metrics, the force field and free groups (nodes)."""
