"""The record model, pure (no file I/O): frames and boxes (frame.py), column dtypes (dtypes.py), declared
precision (precision.py), typed JSON (typed_json.py), the trajectory declaration ``sequence_schema``
(schema.py) and the text form of records, frames, readers and writers (describe.py)."""
