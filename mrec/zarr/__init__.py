"""Layer 2: a hand-written Zarr V3 core (metadata, dtypes, codecs and sharding, stores, the read path,
arrays, sharded append)."""
