"""``zarr.json`` documents of groups and arrays, parsed and emitted.

Parsing is strict about what mrec cannot honour (non-regular grids,
storage transformers, unknown codecs, types outside the set, extension
fields that must be understood) and keeps what it need not understand
(``attributes``, ``dimension_names``, ignorable extensions) verbatim.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import MetadataError, UnsupportedError
from .dtypes import DATA_TYPES, DataType, default_fill, fill_value_to_json, parse_data_type, parse_fill_value
from .pipeline import CodecPipeline

MAX_RANK = 32
MAX_DIM = 2**62
MAX_SHARD_ENTRIES = 2**24     # a 256 MiB shard index (the reference writer clamps at 4096)

_ARRAY_KEYS = {"zarr_format", "node_type", "shape", "data_type", "chunk_grid", "chunk_key_encoding",
               "fill_value", "codecs", "attributes", "dimension_names", "storage_transformers"}
_GROUP_KEYS = {"zarr_format", "node_type", "attributes"}


#: Deepest nesting of a JSON document mrec reads or writes (attributes, meta, documents): deeper
#: ones are refused by name before anything recursive (json, copies, checks) can exhaust the stack
MAX_JSON_DEPTH = 256


def json_depth_exceeds(value, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when ``value`` (dicts / mappings, lists / tuples) nests more than ``limit`` levels, or
    is cyclic; walked with an explicit stack, never by recursion."""
    from collections.abc import Mapping
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if type(v) is dict or isinstance(v, Mapping):
            kids = v.values()
        elif type(v) is list or isinstance(v, tuple):
            kids = v
        else:
            continue
        if d > limit:
            return True
        stack.extend((k, d + 1) for k in kids)
    return False


def json_dumps(doc) -> bytes:
    """Canonical JSON for zarr.json: indented, NaN forbidden."""
    return json.dumps(doc, indent=2, allow_nan=False, ensure_ascii=False).encode("utf-8")


def _reject_constant(c):
    raise ValueError(f"non-standard JSON constant {c}")


def json_loads(raw: bytes, where: str):
    if len(raw) > 64 * 2**20:
        raise MetadataError(f"zarr.json of {len(raw)} bytes is larger than 64 MiB", path=where)
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except RecursionError:
        raise MetadataError(f"zarr.json nests deeper than {MAX_JSON_DEPTH} levels", path=where) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise MetadataError(f"zarr.json is not valid JSON: {exc}", path=where) from None
    if json_depth_exceeds(doc):
        raise MetadataError(f"zarr.json nests deeper than {MAX_JSON_DEPTH} levels", path=where)
    return doc


@dataclass(frozen=True)
class ChunkKeyEncoding:
    name: str = "default"        # default | v2
    separator: str = "/"

    @classmethod
    def from_json(cls, v, where):
        if v is None:
            return cls()
        if isinstance(v, str):
            v = {"name": v}
        if not isinstance(v, dict):
            raise MetadataError(f"chunk_key_encoding {v!r} is not an object", path=where)
        name = v.get("name")
        conf = v.get("configuration") or {}
        if not isinstance(conf, dict):
            raise MetadataError(f"chunk_key_encoding configuration {conf!r} is not an object", path=where)
        if name not in ("default", "v2"):
            raise UnsupportedError(f"chunk_key_encoding {name!r} is not 'default' or 'v2'", path=where)
        sep = conf.get("separator", "/" if name == "default" else ".")
        if sep not in ("/", "."):
            raise MetadataError(f"chunk key separator {sep!r} is not '/' or '.'", path=where)
        return cls(name, sep)

    def to_json(self):
        return {"name": self.name, "configuration": {"separator": self.separator}}

    def key(self, coords) -> str:
        if self.name == "default":
            return self.separator.join(["c", *map(str, coords)])
        return self.separator.join(map(str, coords)) if len(coords) else "0"


def _int_list(v, where, what, *, positive=False) -> tuple[int, ...]:
    if not isinstance(v, list) or len(v) > MAX_RANK:
        raise MetadataError(f"{what} {v!r} is not a list of at most {MAX_RANK} integers", path=where)
    for i in v:
        if isinstance(i, bool) or not isinstance(i, int) or i < (1 if positive else 0) or i > MAX_DIM:
            raise MetadataError(f"{what} {v!r} holds {i!r}, not an integer in [{1 if positive else 0}, 2^62]", path=where)
    return tuple(v)


@dataclass(frozen=True)
class ArrayMetadata:
    shape: tuple[int, ...]
    data_type: DataType
    chunk_shape: tuple[int, ...]
    codecs: CodecPipeline
    fill_value: object
    chunk_key_encoding: ChunkKeyEncoding = ChunkKeyEncoding()
    attributes: dict = field(default_factory=dict)
    dimension_names: tuple | None = None
    extra: dict = field(default_factory=dict)   # ignorable extension fields, kept verbatim

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def chunk_grid_shape(self) -> tuple[int, ...]:
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunk_shape))

    def with_shape(self, shape) -> "ArrayMetadata":
        return replace(self, shape=tuple(int(s) for s in shape))

    def with_attributes(self, attrs: dict) -> "ArrayMetadata":
        return replace(self, attributes=dict(attrs))

    @classmethod
    def create(cls, shape, data_type: DataType, chunk_shape, codecs: CodecPipeline, *,
               fill_value=None, attributes=None, chunk_key_encoding=None, dimension_names=None) -> "ArrayMetadata":
        return cls(tuple(int(s) for s in shape), data_type, tuple(int(c) for c in chunk_shape), codecs,
                   default_fill(data_type) if fill_value is None else fill_value,
                   chunk_key_encoding or ChunkKeyEncoding(), dict(attributes or {}),
                   tuple(dimension_names) if dimension_names is not None else None)

    @classmethod
    def from_json(cls, doc: dict, where: str) -> "ArrayMetadata":
        if doc.get("zarr_format") != 3 or isinstance(doc.get("zarr_format"), bool):
            raise UnsupportedError(f"zarr_format {doc.get('zarr_format')!r} is not 3", path=where)
        if doc.get("node_type") != "array":
            raise MetadataError(f"node_type {doc.get('node_type')!r} is not 'array'", path=where)
        for k in ("shape", "data_type", "chunk_grid", "codecs", "fill_value"):
            if k not in doc:
                raise MetadataError(f"array metadata lacks {k!r}", path=where)
        extra = {}
        for k, v in doc.items():
            if k in _ARRAY_KEYS:
                continue
            if isinstance(v, dict) and v.get("must_understand") is False:
                extra[k] = v
                continue
            raise UnsupportedError(f"unknown field {k!r} that must be understood", path=where)
        st = doc.get("storage_transformers", [])
        if st not in ([], None):
            raise UnsupportedError(f"storage_transformers {st!r} are not supported", path=where)
        shape = _int_list(doc["shape"], where, "shape")
        dt = parse_data_type(doc["data_type"], where)
        grid = doc["chunk_grid"]
        if not isinstance(grid, dict) or grid.get("name") != "regular":
            raise UnsupportedError(f"chunk_grid {grid!r} is not regular", path=where)
        gconf = grid.get("configuration") or {}
        if not isinstance(gconf, dict):
            raise MetadataError(f"chunk_grid configuration {gconf!r} is not an object", path=where)
        chunk_shape = _int_list(gconf.get("chunk_shape"), where, "chunk_shape", positive=True)
        if len(chunk_shape) != len(shape):
            raise MetadataError(f"chunk_shape {list(chunk_shape)} does not match shape {list(shape)}", path=where)
        n_chunks = 1
        for s, c in zip(shape, chunk_shape):
            n_chunks *= -(-s // c)
        if n_chunks > 2**48:
            raise MetadataError(f"shape {list(shape)} over chunks {list(chunk_shape)} makes {n_chunks} chunks", path=where)
        codecs = CodecPipeline.from_json(doc["codecs"], where)
        _check_pipeline(codecs, dt, chunk_shape, where)
        fill = parse_fill_value(doc["fill_value"], dt, where)
        attrs = doc.get("attributes", {})
        if not isinstance(attrs, dict):
            raise MetadataError("attributes is not an object", path=where)
        dims = doc.get("dimension_names")
        if dims is not None:
            if not isinstance(dims, list) or len(dims) != len(shape) or not all(d is None or isinstance(d, str) for d in dims):
                raise MetadataError(f"dimension_names {dims!r} do not match the shape", path=where)
            dims = tuple(dims)
        return cls(shape, dt, chunk_shape, codecs, fill,
                   ChunkKeyEncoding.from_json(doc.get("chunk_key_encoding"), where), attrs, dims, extra)

    def to_json(self) -> dict:
        doc = {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(self.shape),
            "data_type": self.data_type.name,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(self.chunk_shape)}},
            "chunk_key_encoding": self.chunk_key_encoding.to_json(),
            "fill_value": fill_value_to_json(self.fill_value, self.data_type),
            "codecs": self.codecs.to_json(),
            "attributes": self.attributes,
        }
        if self.dimension_names is not None:
            doc["dimension_names"] = list(self.dimension_names)
        doc.update(self.extra)
        return doc


def _check_pipeline(p: CodecPipeline, dt: DataType, chunk_shape, where: str) -> None:
    """Refuse a pipeline whose serializer cannot hold the data type, at any depth."""
    from .codecs.bytes_ import BytesCodec
    from .codecs.sharding import ShardingCodec
    from .codecs.vlen_utf8 import VlenUtf8Codec
    ab = p.array_bytes
    if isinstance(ab, ShardingCodec):
        shape = list(chunk_shape)
        for c in p.array_array:
            shape = list(c.resolve(_fake_spec(shape, dt)).shape)
        if len(ab.chunk_shape) != len(shape):
            raise MetadataError(f"sharding chunk_shape {list(ab.chunk_shape)} does not match rank {len(shape)}", path=where)
        grid = ab.grid(tuple(shape), where)
        entries = 1
        for g in grid:
            entries *= g
        if entries > MAX_SHARD_ENTRIES:
            raise MetadataError(f"a shard of {entries} inner chunks: its index would exceed {MAX_SHARD_ENTRIES} entries", path=where)
        _check_pipeline(ab.codecs, dt, ab.chunk_shape, where)
        _check_pipeline(ab.index_codecs, DATA_TYPES["uint64"], (*grid, 2), where)
    elif isinstance(ab, VlenUtf8Codec) and not dt.is_string:
        raise MetadataError(f"vlen-utf8 cannot serialise {dt.name}", path=where)
    elif isinstance(ab, BytesCodec) and dt.is_string:
        raise MetadataError("a string array needs vlen-utf8, not bytes", path=where)
    elif isinstance(ab, BytesCodec) and ab.endian is None and (dt.itemsize > 1 or dt.numpy.kind == "c"):
        # the bytes codec: "endian" is required for a data type of more than one byte; an error of
        # this zarr.json, found when it is opened, not when a chunk is read
        raise MetadataError(f"the bytes codec has no endian, which {dt.name} ({dt.itemsize} bytes) needs",
                            path=where)


def _fake_spec(shape, dt):
    from .codecs.base import ChunkSpec
    return ChunkSpec(tuple(shape), dt, None)


@dataclass(frozen=True)
class GroupMetadata:
    attributes: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: dict, where: str) -> "GroupMetadata":
        if doc.get("zarr_format") != 3 or isinstance(doc.get("zarr_format"), bool):
            raise UnsupportedError(f"zarr_format {doc.get('zarr_format')!r} is not 3", path=where)
        if doc.get("node_type") != "group":
            raise MetadataError(f"node_type {doc.get('node_type')!r} is not 'group'", path=where)
        attrs = doc.get("attributes", {})
        if not isinstance(attrs, dict):
            raise MetadataError("attributes is not an object", path=where)
        extra = {}
        for k, v in doc.items():
            if k in _GROUP_KEYS:
                continue
            # Zarr V3 core, group metadata: "An implementation must fail to open zarr hierarchies or
            # groups with unknown metadata fields, with the exception of objects with a
            # "must_understand": false key-value pair"
            if k == "consolidated_metadata" and v is None:
                extra[k] = v        # zarr-python 3.0 wrote this null ("none"): read as absent, kept verbatim
                continue
            if not (isinstance(v, dict) and v.get("must_understand") is False):
                raise UnsupportedError(f"unknown group field {k!r} that must be understood (an extension "
                                       "field is ignorable only as an object with \"must_understand\": false)",
                                       path=where)
            extra[k] = v
        return cls(attrs, extra)

    def to_json(self) -> dict:
        return {"zarr_format": 3, "node_type": "group", "attributes": self.attributes, **self.extra}


def parse_node(raw: bytes, where: str):
    doc = json_loads(raw, where)
    if not isinstance(doc, dict):
        raise MetadataError("zarr.json is not a JSON object", path=where)
    nt = doc.get("node_type")
    if nt == "array":
        return ArrayMetadata.from_json(doc, where)
    if nt == "group":
        return GroupMetadata.from_json(doc, where)
    raise MetadataError(f"node_type {nt!r} is not 'array' or 'group'", path=where)


def grid_cells(grid: tuple[int, ...]):
    """np.ndindex(*grid), without building an iterator for the usual single cell."""
    if all(g == 1 for g in grid):
        return ((0,) * len(grid),)
    return np.ndindex(*grid)


def as_rows(data, meta: ArrayMetadata) -> np.ndarray:
    """``data`` as an array of ``meta``'s data type (an object array for strings): a numpy dtype of
    the same kind and size is taken as it is stored, any other is refused."""
    dt = meta.data_type
    if dt.is_string:
        arr = np.asarray(data, dtype=object)
    else:
        arr = np.asarray(data)
        if arr.dtype != dt.numpy:
            if arr.dtype.kind != dt.numpy.kind or arr.dtype.itemsize != dt.numpy.itemsize:
                raise MetadataError(f"data of dtype {arr.dtype} does not match array type {dt.name}")
            arr = arr.astype(dt.numpy)
    return arr
