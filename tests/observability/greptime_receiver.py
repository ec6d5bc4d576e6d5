"""A local receiver of GreptimeDB's gRPC protocol: what ``greptimedb-ingester`` really sends.

The vendored ``greptime.v1`` protos (tests/observability/proto) are compiled with grpcio-tools
into a temporary directory; a grpcio server on 127.0.0.1 implements ``GreptimeDatabase``
(``Handle``, ``HandleRequests``) and ``HealthCheck``, and decodes each row insert into
:class:`ReceivedRow` values (column → Python value, and each column's semantic type).
"""

from __future__ import annotations

import importlib
import sys
import tempfile
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

PROTO_ROOT = Path(__file__).parent / "proto"
_PROTOS = ("common", "row", "column", "ddl", "prom", "health", "database")
_compiled: dict[str, ModuleType] = {}
_compile_lock = threading.Lock()


def _modules() -> dict[str, ModuleType]:
    """The generated ``*_pb2`` / ``*_pb2_grpc`` modules, compiled once per test process."""
    with _compile_lock:
        if _compiled:
            return _compiled
        from grpc_tools import protoc

        out = tempfile.mkdtemp(prefix="greptime-proto-")
        files = [f"greptime/v1/{name}.proto" for name in _PROTOS]
        include = str(Path(protoc.__file__).parent / "_proto")
        args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out}"]
        if protoc.main([*args, f"--grpc_python_out={out}", *files]) != 0:
            raise RuntimeError("grpc_tools.protoc failed on the vendored greptime protos")
        sys.path.insert(0, out)
        for name in ("common", "row", "database", "database_pb2_grpc", "health", "health_pb2_grpc"):
            module = name if name.endswith("_grpc") else f"{name}_pb2"
            _compiled[name] = importlib.import_module(f"greptime.v1.{module}")
        return _compiled


@dataclass(frozen=True)
class ReceivedRow:
    """One decoded row of a row insert."""

    database: str
    table: str
    values: dict[str, Any]
    semantics: dict[str, str]  # column → TAG / FIELD / TIMESTAMP


class GreptimeReceiver:
    """A gRPC server on 127.0.0.1 that stores every row insert it is sent."""

    def __init__(self) -> None:
        import grpc

        mods = _modules()
        self._common_pb2 = mods["common"]
        self.rows: list[ReceivedRow] = []
        self.requests = 0
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        mods["database_pb2_grpc"].add_GreptimeDatabaseServicer_to_server(
            _Database(self, mods["database"], mods["common"]), self._server
        )
        mods["health_pb2_grpc"].add_HealthCheckServicer_to_server(
            _Health(mods["health"]), self._server
        )
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    @property
    def address(self) -> str:
        """``host:port`` for ``QUEUECORE_GREPTIMEDB_GRPC``."""
        return f"127.0.0.1:{self.port}"

    def table(self, name: str) -> list[ReceivedRow]:
        """The rows received so far for one table."""
        with self._lock:
            return [row for row in self.rows if row.table == name]

    def stop(self) -> None:
        """Stop serving (in-flight calls get a moment to finish)."""
        self._server.stop(0.5).wait()

    def take(self, request: Any) -> int:
        """Record the row inserts of one ``GreptimeRequest``; the number of rows."""
        database = request.header.dbname or request.header.schema
        decoded = [
            row
            for insert in request.row_inserts.inserts
            for row in self._decode(database, insert.table_name, insert.rows)
        ]
        with self._lock:
            self.requests += 1
            self.rows.extend(decoded)
        return len(decoded)

    def _decode(self, database: str, table: str, rows: Any) -> Iterator[ReceivedRow]:
        semantic_names = self._common_pb2.SemanticType.Name
        names = [column.column_name for column in rows.schema]
        semantics = {c.column_name: semantic_names(c.semantic_type) for c in rows.schema}
        for row in rows.rows:
            values = {
                name: getattr(value, value.WhichOneof("value_data"))
                if value.WhichOneof("value_data")
                else None
                for name, value in zip(names, row.values, strict=True)
            }
            yield ReceivedRow(database, table, values, semantics)


class _Database:
    """``greptime.v1.GreptimeDatabase``: row inserts are stored and acknowledged."""

    def __init__(
        self, receiver: GreptimeReceiver, database: ModuleType, common: ModuleType
    ) -> None:
        self._receiver = receiver
        self._database = database
        self._common = common

    def _answer(self, rows: int) -> Any:
        affected = self._common.AffectedRows(value=rows)
        return self._database.GreptimeResponse(affected_rows=affected)

    def Handle(self, request: Any, context: Any) -> Any:
        """One request."""
        return self._answer(self._receiver.take(request))

    def HandleRequests(self, requests: Any, context: Any) -> Any:
        """A stream of requests, one answer."""
        return self._answer(sum(self._receiver.take(request) for request in requests))


class _Health:
    """``greptime.v1.HealthCheck``: always healthy."""

    def __init__(self, health_pb2: ModuleType) -> None:
        self._pb2 = health_pb2

    def HealthCheck(self, request: Any, context: Any) -> Any:
        """Healthy."""
        return self._pb2.HealthCheckResponse()
