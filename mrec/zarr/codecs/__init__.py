"""Zarr V3 codecs: one a module, the interfaces (``base``), the chain (``chain``), the registry
(``registry``), ``sharding_indexed``, and the resolved and batch encoders / decoders (``fused``, ``batch``)."""
