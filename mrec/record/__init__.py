"""The record model: column dtypes, declared precision, typed JSON, frames and
the trajectory declaration (``sequence_schema``).

Everything in this package is pure (no file I/O): the bindings (``mrec.zarr``
and the section readers/writers) build on it.
"""
