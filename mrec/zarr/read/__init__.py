"""The one read path of a Zarr array: plan (``plan.py``: which chunks, which rows, which byte ranges;
pure) -> fetch (``fetch.py``: range reads, batched; ``index.py``: the shard-index source) -> decode
(``decode.py``: serial or on the pool, into the output).  ``path.py`` runs the three steps for every
public read, ``frame.py`` is its frame case (rows inside one inner chunk), ``cache.py`` what an
array's reads keep between calls."""
