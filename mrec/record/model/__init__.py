"""The record model, pure (no file I/O): frames (frame.py) and their cell (box.py), what may name a node and
what text a record may hold (names.py), column dtypes (dtypes.py), declared precision (precision.py), typed
JSON (typed_json.py), the trajectory declaration ``sequence_schema`` (schema.py) and its single declarations
(declarations.py), and the text form of records, frames, readers and writers (describe.py)."""
