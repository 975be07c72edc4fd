"""The archive's rows of a read of decision-log entries, made column by column (no Python object per row).

A read of thousands of entries becomes one Arrow table: the record JSONs (the ``r`` fields) are
parsed at once by DuckDB (``json_transform``, one parse per record, in C++ and without the GIL),
every column is taken from that, the hook input and the settled outcome straight from the
stream fields, and the table is split by (day, tenant). Python touches each entry only to take
its fields out of the reply (list slices).

The columns are those of :meth:`bus.decisionlog.parquet.Rows.add`, with one difference: nested
values (``hooks``, ``shadow``, ``masked``, ``output``) are the same JSON written again by DuckDB,
so a number may be written in another form (``1.5e+20`` as ``150000000000000000000.0``); it
reads as the same value. A read whose entries are not all alike (fields in another order, a
record JSON that does not parse, a field that is not UTF-8, two keys alike) is made row by row
as before (:func:`bus.decisionlog.parquet.add_entries`), and so is ``extra`` for each record
whose JSON has keys the schema does not name.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc

#: The record JSON's keys read into columns, and their types (``JSON``: kept as JSON text).
_STRUCT: Final = {
    "outcome": "VARCHAR",
    "id": "VARCHAR",
    "tn": "VARCHAR",
    "ts": "BIGINT",
    "dms": "BIGINT",
    "ev": "VARCHAR",
    "sid": "VARCHAR",
    "ag": "VARCHAR",
    "aid": "VARCHAR",
    "aty": "VARCHAR",
    "tool": "VARCHAR",
    "tuid": "VARCHAR",
    "dec": "VARCHAR",
    "rsn": "VARCHAR",
    "rev": "VARCHAR",
    "tid": "VARCHAR",
    "tok": "VARCHAR",
    "src": "VARCHAR",
    "hooks": "JSON",
    "shadow": "JSON",
    "mask": "JSON",
    "out": "JSON",
}
#: The stream fields a record's own columns come from; any other is kept in ``extra``.
FIELDS: Final = (b"r", b"in", b"o", b"fo")
_KNOWN_KEYS: Final = ", ".join(f"'{key}'" for key in _STRUCT)


#: Each column read from the record JSON (the ``r`` field) and its key there (LogRecord.meta's keys).
FROM_META: Final = (
    ("event", "ev"),
    ("session_id", "sid"),
    ("agent", "ag"),
    ("agent_id", "aid"),
    ("agent_type", "aty"),
    ("tool_name", "tool"),
    ("tool_use_id", "tuid"),
    ("decision", "dec"),
    ("reason", "rsn"),
    ("revision", "rev"),
    ("trace_id", "tid"),
    ("token_id", "tok"),
    ("client_address", "src"),
)
#: The columns of JSON text read from the record JSON, and their keys there.
JSON_FROM_META: Final = (("hooks", "hooks"), ("shadow", "shadow"), ("masked", "mask"), ("output", "out"))
#: The text columns taken from the record JSON, in the schema's three runs of them (``""`` is left
#: out, as null): event .. tool_use_id, decision and reason, revision .. client_address.
_TEXT_KEYS: Final = FROM_META[:7]
_TEXT_KEYS_2: Final = FROM_META[7:9]
_TEXT_KEYS_3: Final = FROM_META[9:]


def _sql(extra_fields: Sequence[str]) -> str:
    """The query making a read's rows in the archive's columns, then ``day``, ``tenant`` and ``unknown``
    (table ``t``: ``log_id``, ``r``, ``input``, ``o``, ``fo`` and the other fields as ``f0``, ``f1``...)."""
    pairs = ", ".join(f"{_quoted(name)}, f{i}" for i, name in sorted(enumerate(extra_fields), key=lambda item: item[1]))
    extra = f"json_object({pairs})" if pairs else "NULL::VARCHAR"

    def text(keys: Sequence[tuple[str, str]]) -> str:
        return " ".join(f"NULLIF(j.{key}, '') AS {column}," for column, key in keys)

    # The text is constants, and the field names quoted by _quoted.
    return f"""
SELECT log_id, j.id AS id, j.ts AS time, {text(_TEXT_KEYS)}
  COALESCE(NULLIF(o, ''), j.outcome) AS outcome, NULLIF(fo, '') AS fail_open, {text(_TEXT_KEYS_2)}
  NULLIF(array_to_string(
    [h.id FOR h IN TRY_CAST(j.hooks AS STRUCT(id VARCHAR, decided BOOLEAN)[]) IF h.decided], ','), '') AS rule,
  j.ts AS received_ms, j.dms AS decided_ms, j.dms - j.ts AS latency_ms, {text(_TEXT_KEYS_3)}
  j.hooks::VARCHAR AS hooks, j.shadow::VARCHAR AS shadow, j.mask::VARCHAR AS masked, j.out::VARCHAR AS output,
  input, {extra} AS extra,
  strftime(make_timestamp(j.ts * 1000), '%Y-%m-%d') AS day, j.tn AS tenant,
  len([k FOR k IN json_keys(r) IF NOT list_contains([{_KNOWN_KEYS}], k)]) > 0 AS unknown
FROM (SELECT json_transform(r, '{orjson.dumps(_STRUCT).decode()}') AS j, * FROM t)
"""  # noqa: S608


def _quoted(name: str) -> str:
    """``name`` as an SQL string literal."""
    return "'" + name.replace("'", "''") + "'"


class Unlike(Exception):
    """The entries of a read are not all alike: made row by row instead."""


_root_lock = threading.Lock()
_root: list[duckdb.DuckDBPyConnection] = []


@contextlib.contextmanager
def _db() -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection of its own to the process's one DuckDB (one thread of its own: the archiver
    reads while it runs), closed after use. A connection left open in a thread (one kept per
    thread) made a later fork with a ``preexec_fn`` from another thread crash in the child."""
    with _root_lock:
        if not _root:
            _root.append(duckdb.connect(config={"threads": 1}))
        cursor = _root[0].cursor()
    try:
        yield cursor
    finally:
        cursor.close()


def _table(relation: Any) -> pa.Table:
    """A DuckDB relation's rows as an Arrow table (``to_arrow_table`` from DuckDB 1.4, ``arrow`` before)."""
    fetch = getattr(relation, "to_arrow_table", None)
    return fetch() if fetch is not None else relation.arrow()


def layout(pairs: Sequence[Sequence[bytes]], flat: list[bytes]) -> list[bytes]:
    """The field names every entry has, in the same order (each ``[name, value, name, value...]``,
    ``flat`` all of them one after the other); Unlike otherwise."""
    lengths = set(map(len, pairs))
    if len(lengths) != 1:
        raise Unlike("entries of different lengths")
    (width,) = lengths
    names = [flat[at] for at in range(0, width, 2)]
    if any(flat[at::width].count(name) != len(pairs) for at, name in zip(range(0, width, 2), names, strict=True)):
        raise Unlike("fields in another order")
    if len(set(names)) != len(names) or b"r" not in names or b"in" not in names:
        raise Unlike("not the fields of decision-log records")
    return names


def _text(values: list[bytes]) -> pa.Array:
    return pa.array(values, pa.binary()).cast(pa.string())  # ArrowInvalid when one is not UTF-8


def columns(log_ids: Sequence[bytes], pairs: Sequence[Sequence[bytes]], meta_keys: frozenset[str]) -> pa.Table:
    """The rows of entries alike (:func:`layout`; none empty) in the archive's columns (``time`` in
    epoch ms), then ``day``, ``tenant`` and ``unknown``; Unlike when they cannot all be made at once.
    ``meta_keys``: the record JSON's keys that have columns (any other goes to ``extra``)."""
    flat = list(itertools.chain.from_iterable(pairs))
    names = layout(pairs, flat)
    width = len(names) * 2
    values = {name: flat[at * 2 + 1 :: width] for at, name in enumerate(names)}
    others = [name for name in names if name not in FIELDS]
    empty = [b""] * len(pairs)
    try:
        table = pa.table(
            {
                "log_id": _text(list(log_ids)),
                "r": _text(values[b"r"]),
                "input": _text(values[b"in"]),
                "o": _text(values.get(b"o") or empty),
                "fo": _text(values.get(b"fo") or empty),
                **{f"f{i}": _text(values[name]) for i, name in enumerate(others)},
            }
        )
        with _db() as db:
            db.register("t", table)
            made = _table(db.sql(_sql([name.decode() for name in others])))  # (a UnicodeError: Unlike)
    except (duckdb.Error, pa.ArrowException, UnicodeError) as exc:
        raise Unlike(str(exc)) from exc
    if made.num_rows != len(pairs) or any(made[name].null_count for name in ("id", "tenant", "time", "decided_ms")):
        raise Unlike("records without an id, tenant or time")
    if pc.any(made["unknown"]).as_py():
        made = made.set_column(made.schema.get_field_index("extra"), "extra", _extra(made, values, others, meta_keys))
    return made


def _extra(
    made: pa.Table, values: Mapping[bytes, list[bytes]], others: Sequence[bytes], meta_keys: frozenset[str]
) -> pa.Array:
    """``extra`` with the keys of the record JSON the schema does not name, where there are some
    (as :meth:`bus.decisionlog.parquet.Rows.add` makes it: those keys sorted, then the other fields)."""
    extra: list[Any] = made["extra"].to_pylist()
    for at in pc.indices_nonzero(made["unknown"]).to_pylist():
        meta = orjson.loads(values[b"r"][at])
        kept = {key: meta[key] for key in sorted(meta.keys() - meta_keys)}
        for name in sorted(others):
            kept[name.decode()] = values[name][at].decode()
        extra[at] = orjson.dumps(kept).decode()
    return pa.array(extra, pa.string())


def split(made: pa.Table, schema: pa.Schema) -> dict[tuple[str, str], pa.Table]:
    """The rows of :func:`columns` by (day, tenant), each in ``schema`` and in the order read."""
    key = pc.binary_join_element_wise(made["day"], made["tenant"], "\n")
    found = pc.unique(key)
    if len(found) > 1:  # one stable sort, then each (day, tenant) is a slice
        order = pc.sort_indices(key)
        made, key = made.take(order), key.take(order)
    rows = made.select(schema.names).cast(schema)
    parts, at = {}, 0
    for each in (
        pc.value_counts(key).to_pylist() if len(found) > 1 else [{"values": found[0].as_py(), "counts": len(key)}]
    ):
        day, tenant = str(each["values"]).split("\n", 1)
        parts[(day, tenant)] = rows.slice(at, each["counts"])
        at += each["counts"]
    return parts


__all__ = ["FIELDS", "FROM_META", "JSON_FROM_META", "Unlike", "columns", "layout", "split"]
