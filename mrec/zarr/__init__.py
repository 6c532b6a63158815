"""Layer 2: a hand-written Zarr V3 core (metadata, dtypes, codecs, sharding, stores, arrays)."""
