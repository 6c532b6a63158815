"""The one read path of a Zarr array: plan (which chunks, which rows) -> fetch (range reads, batched)
-> decode (serial or on the pool, into the output)."""
