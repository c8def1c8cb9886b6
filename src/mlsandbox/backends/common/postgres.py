"""Reading a PostgreSQL source's table the way every backend answers ``query``: the rows as Parquet, the
table's whole row count, and the server's failures as typed :class:`SourceError` (``auth`` when the
password is refused, ``unavailable`` when the server cannot be reached, ``error`` otherwise)."""

from __future__ import annotations

import io
from typing import Literal

from mlsandbox.backends.protocols.sources import SourceError, TableRows


def read_table(dsn: str, table: str, limit: int | None = None) -> TableRows:
    """``table``'s rows (the first ``limit`` of them, or all) through a connection to ``dsn``."""
    import pandas as pd
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(dsn) as conn:
            total = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()
            statement = sql.SQL("SELECT * FROM {}").format(sql.Identifier(table))
            if limit is not None:
                statement = sql.SQL("{} LIMIT {}").format(statement, sql.Literal(limit))
            cur = conn.execute(statement)
            names = [d.name for d in cur.description or []]
            frame = pd.DataFrame.from_records(cur.fetchall(), columns=names)
    except psycopg.OperationalError as e:
        text = " ".join(str(e).split())
        kind: Literal["auth", "unavailable"] = (
            "auth" if "password authentication failed" in text else "unavailable"
        )
        raise SourceError(kind, text) from None
    except psycopg.Error as e:
        raise SourceError("error", f"{type(e).__name__}: {e}") from None
    for name in frame.columns:  # NULLs make numeric columns object: back to numbers
        if frame[name].dtype == object:
            converted = pd.to_numeric(frame[name], errors="coerce")
            if converted.notna().sum() == frame[name].notna().sum() and frame[name].notna().any():
                frame[name] = converted
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    return TableRows(parquet=buf.getvalue(), total_rows=int(total[0]) if total else len(frame))
