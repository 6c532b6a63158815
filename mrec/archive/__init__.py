"""Layer 4: the packed form. ``pack`` / ``unpack`` (pack.py), ``repack`` (repack.py) and packing straight
to an object store (upload.py)."""
