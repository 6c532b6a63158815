"""Zarr stores: the read interface and the directory store (directory.py), the zip store read with
random access (zip_read.py) over the ZIP format's records and packing rules (zip_format.py), the
zip writer (zip_write.py) and stores at a URL (remote.py)."""
