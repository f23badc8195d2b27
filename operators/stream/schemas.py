"""Schemas of stream operators: the library's :class:`~operators.expr.Schema` made from a
plain ``{column: dtype}`` dict or an Arrow schema, and Arrow columns turned into packet
columns (numbers only: dates as int32 days, timestamps as int64 in their unit, strings as
int32 codes of a sorted dictionary, as everywhere in ``operators``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from operators.data import decimal_to_float64
from operators.expr import Field, Schema


def as_schema(schema) -> Schema:
    """A Schema from a Schema, a ``{name: numpy dtype}`` dict or a pyarrow schema (strings
    there need :func:`arrow_schema`'s dictionaries)."""
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, pa.Schema):
        return arrow_schema(schema)
    if isinstance(schema, dict):
        fields = []
        for name, dt in schema.items():
            dt = np.dtype(dt)
            if dt.kind in "iu":
                kind = "int"
            elif dt.kind == "f":
                kind = "float"
            elif dt.kind == "b":
                kind = "bool"
            else:
                raise ValueError(f"column {name!r}: dtype {dt} is not a number (strings need a dictionary)")
            fields.append(Field(name, kind, dt))
        return Schema(fields)
    raise TypeError(f"not a schema: {schema!r}")


def arrow_schema(schema: pa.Schema, dictionaries: dict | None = None) -> Schema:
    """The packet schema of Arrow `schema`; string columns take their sorted dictionary
    from `dictionaries` (name -> pa.Array)."""
    fields = []
    for f in schema:
        t = f.type
        if pa.types.is_dictionary(t):
            t = t.value_type
        if pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_time(t):
            fields.append(Field(f.name, "int", np.dtype(np.int64)))
        elif pa.types.is_date(t):
            fields.append(Field(f.name, "date", np.dtype(np.int32)))
        elif pa.types.is_boolean(t):
            fields.append(Field(f.name, "bool", np.dtype(np.bool_)))
        elif pa.types.is_integer(t):
            fields.append(Field(f.name, "int", np.dtype(np.int32) if pa.types.is_int32(t) else np.dtype(np.int64)))
        elif pa.types.is_floating(t) or pa.types.is_decimal(t):
            fields.append(Field(f.name, "float", np.dtype(np.float64)))
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            dic = (dictionaries or {}).get(f.name)
            if dic is None:
                raise ValueError(f"column {f.name!r}: a string column needs its dictionary")
            fields.append(Field(f.name, "string", np.dtype(np.int32), dic))
        else:
            raise ValueError(f"column {f.name!r}: unsupported type {t}")
    return Schema(fields)


def sorted_dictionary(values) -> pa.Array:
    """The sorted distinct strings of `values` (an Arrow array or chunked array)."""
    t = values.type
    if pa.types.is_dictionary(t):
        values = values.cast(t.value_type)
    if not pa.types.is_string(values.type):
        values = values.cast(pa.string())
    uniq = pc.unique(values)
    d = uniq.take(pc.array_sort_indices(uniq))
    return d.combine_chunks() if isinstance(d, pa.ChunkedArray) else d


def to_numpy(data, field: Field) -> np.ndarray:
    """Arrow column `data` (array or chunked array, no nulls) as the packet column of
    `field`."""
    if data.null_count:
        raise ValueError(f"column {field.name!r} holds {data.null_count} nulls (not supported)")
    t = data.type
    if pa.types.is_dictionary(t):
        data = data.cast(t.value_type)
        t = data.type
    if field.kind == "string":
        if not pa.types.is_string(t):
            data = data.cast(pa.string())
        codes = pc.index_in(data, value_set=field.dictionary)
        if codes.null_count:
            raise ValueError(f"column {field.name!r} holds a string missing from its dictionary")
        return np.asarray(codes.cast(pa.int32()).to_numpy(), np.int32)
    if pa.types.is_decimal(t):
        return decimal_to_float64(data)
    if pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_time(t) or pa.types.is_date(t):
        data = data.cast(pa.int64() if field.kind == "int" else pa.int32())
    elif pa.types.is_boolean(t):
        return np.asarray(data.to_numpy(zero_copy_only=False), np.bool_)
    return np.asarray(data.to_numpy(), field.dtype)


def from_arrow(table, schema: Schema) -> dict:
    """``{name: numpy column}`` of an Arrow table or record batch, per `schema`."""
    return {f.name: to_numpy(table.column(f.name), f) for f in schema.fields}


__all__ = ["arrow_schema", "as_schema", "from_arrow", "sorted_dictionary", "to_numpy"]
