"""ctypes binding to the mock cluster in the librdkafka bundled with confluent-kafka.

Finds and loads the shared library, declares the C signatures of the mock
cluster API (``librdkafka``), turns error codes and request names into the
integers C takes, refusing any that would not fit (``error_code``,
``api_key``), and wraps one cluster (``MockCluster``). The process that hosts
a cluster and its control channel is ``devbroker``.
"""

from __future__ import annotations

import ctypes
import glob
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from amends_pipeline.errors import UsageError

# Kafka protocol request types (ApiKey), by the names the protocol guide uses.
API_KEYS: dict[str, int] = {
    "Produce": 0,
    "Fetch": 1,
    "ListOffsets": 2,
    "Metadata": 3,
    "OffsetCommit": 8,
    "OffsetFetch": 9,
    "FindCoordinator": 10,
    "JoinGroup": 11,
    "Heartbeat": 12,
    "LeaveGroup": 13,
    "SyncGroup": 14,
    "DescribeGroups": 15,
    "ListGroups": 16,
    "SaslHandshake": 17,
    "ApiVersions": 18,
    "CreateTopics": 19,
    "DeleteTopics": 20,
    "DeleteRecords": 21,
    "InitProducerId": 22,
    "OffsetForLeaderEpoch": 23,
    "AddPartitionsToTxn": 24,
    "AddOffsetsToTxn": 25,
    "EndTxn": 26,
    "TxnOffsetCommit": 28,
    "DescribeConfigs": 32,
    "DescribeCluster": 60,
    "ConsumerGroupHeartbeat": 68,
    "GetTelemetrySubscriptions": 71,
    "PushTelemetry": 72,
}
API_NAMES: dict[int, str] = {v: k for k, v in API_KEYS.items()}

# The ranges of a C int32_t and int64_t; an integer outside them never reaches C.
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)

# What the mock keeps per partition (rdkafka_mock.c: max_size, max_cnt); older
# message sets drop off and the low watermark rises.
RETENTION_BYTES = 5 * 1024 * 1024
RETENTION_BATCHES = 100_000

_RD_KAFKA_PRODUCER = 0


class MockError(Exception):
    """A mock cluster call returned an error code."""

    def __init__(self, what: str, code: int, name: str, text: str) -> None:
        super().__init__(f"{what}: {name}: {text}")
        self.code = code
        self.name = name


def find_librdkafka() -> str:
    """Path of the librdkafka shared library bundled with confluent-kafka."""
    import confluent_kafka

    pkg = Path(confluent_kafka.__file__).resolve().parent
    patterns = [
        str(pkg.parent / "confluent_kafka.libs" / "librdkafka*.so*"),
        str(pkg / ".libs" / "librdkafka*.so*"),
        str(pkg / ".dylibs" / "librdkafka*.dylib"),
    ]
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    msg = f"no librdkafka shared library found beside confluent_kafka ({pkg})"
    raise UsageError(msg)


_LIB: ctypes.CDLL | None = None
_LIB_LOCK = threading.Lock()

# name -> (restype, argtypes); declared only if the symbol exists.
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "rd_kafka_version_str": (ctypes.c_char_p, []),
    "rd_kafka_err2name": (ctypes.c_char_p, [ctypes.c_int]),
    "rd_kafka_err2str": (ctypes.c_char_p, [ctypes.c_int]),
    "rd_kafka_conf_new": (ctypes.c_void_p, []),
    "rd_kafka_conf_set": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t],
    ),
    "rd_kafka_conf_destroy": (None, [ctypes.c_void_p]),
    "rd_kafka_new": (
        ctypes.c_void_p,
        [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t],
    ),
    "rd_kafka_destroy": (None, [ctypes.c_void_p]),
    "rd_kafka_mock_cluster_new": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int]),
    "rd_kafka_mock_cluster_destroy": (None, [ctypes.c_void_p]),
    "rd_kafka_mock_cluster_bootstraps": (ctypes.c_char_p, [ctypes.c_void_p]),
    "rd_kafka_mock_topic_create": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    ),
    "rd_kafka_mock_topic_delete": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
    "rd_kafka_mock_topic_set_error": (None, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]),
    "rd_kafka_mock_partition_delete_records": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int64],
    ),
    "rd_kafka_mock_broker_set_down": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32]),
    "rd_kafka_mock_broker_set_up": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32]),
    "rd_kafka_mock_broker_set_rtt": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int],
    ),
    "rd_kafka_mock_push_request_errors_array": (
        None,
        [ctypes.c_void_p, ctypes.c_int16, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)],
    ),
    "rd_kafka_mock_clear_request_errors": (None, [ctypes.c_void_p, ctypes.c_int16]),
    "rd_kafka_mock_start_request_tracking": (None, [ctypes.c_void_p]),
    "rd_kafka_mock_stop_request_tracking": (None, [ctypes.c_void_p]),
    "rd_kafka_mock_clear_requests": (None, [ctypes.c_void_p]),
    "rd_kafka_mock_get_requests": (
        ctypes.POINTER(ctypes.c_void_p),
        [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)],
    ),
    "rd_kafka_mock_request_destroy_array": (
        None,
        [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t],
    ),
    "rd_kafka_mock_request_id": (ctypes.c_int32, [ctypes.c_void_p]),
    "rd_kafka_mock_request_api_key": (ctypes.c_int16, [ctypes.c_void_p]),
    "rd_kafka_mock_request_timestamp": (ctypes.c_int64, [ctypes.c_void_p]),
}

# Without these there is no development broker at all.
_REQUIRED = (
    "rd_kafka_conf_new",
    "rd_kafka_new",
    "rd_kafka_mock_cluster_new",
    "rd_kafka_mock_cluster_destroy",
    "rd_kafka_mock_cluster_bootstraps",
    "rd_kafka_mock_topic_create",
)


def librdkafka() -> ctypes.CDLL:
    """The bundled librdkafka with the mock cluster functions declared."""
    global _LIB
    with _LIB_LOCK:
        if _LIB is None:
            lib = ctypes.CDLL(find_librdkafka())
            for name, (restype, argtypes) in _SIGNATURES.items():
                if not hasattr(lib, name):
                    if name in _REQUIRED:
                        msg = f"bundled librdkafka lacks {name}; no development broker"
                        raise UsageError(msg)
                    continue
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _LIB = lib
        return _LIB


def has_symbol(name: str) -> bool:
    return hasattr(librdkafka(), name)


def librdkafka_version() -> str:
    raw: bytes = librdkafka().rd_kafka_version_str()
    return raw.decode()


def error_code(value: int | str) -> int:
    """An error code from an int or a confluent_kafka.KafkaError name (``_TRANSPORT``)."""
    if isinstance(value, bool):
        msg = f"not an error code: {value!r}"
        raise ValueError(msg)
    if isinstance(value, int):
        return _in_c_int(value, "error code")
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"-?\d{1,20}", text):
            return _in_c_int(int(text), "error code")
        from confluent_kafka import KafkaError

        for candidate in (text, text.upper(), "_" + text.upper().lstrip("_")):
            code = getattr(KafkaError, candidate, None)
            if isinstance(code, int):
                return code
    msg = f"unknown Kafka error {value!r} (use a code or a KafkaError name)"
    raise ValueError(msg)


def _in_c_int(value: int, what: str) -> int:
    """``value`` when it fits a C int (32 bits), else ValueError: never let ctypes truncate it."""
    lo, hi = INT32
    if not lo <= value <= hi:
        msg = f"{what} out of range: {value} (a 32-bit integer, {lo}..{hi})"
        raise ValueError(msg)
    return value


def error_name(code: int) -> str:
    lib = librdkafka()
    raw = lib.rd_kafka_err2name(code)
    return raw.decode() if raw else str(code)


def api_key(value: int | str) -> int:
    """A protocol ApiKey from an int or a request name (``Produce``, ``Fetch``...)."""
    if isinstance(value, bool):
        msg = f"not an api key: {value!r}"
        raise ValueError(msg)
    if isinstance(value, int):
        key = value
    elif isinstance(value, str) and re.fullmatch(r"\d+", value.strip()):
        key = int(value.strip())
    elif isinstance(value, str):
        by_lower = {k.lower(): v for k, v in API_KEYS.items()}
        if value.strip().lower() not in by_lower:
            msg = f"unknown api key {value!r}; known: {', '.join(API_KEYS)}"
            raise ValueError(msg)
        key = by_lower[value.strip().lower()]
    else:
        msg = f"not an api key: {value!r}"
        raise ValueError(msg)
    if not 0 <= key < 2**15:
        msg = f"api key out of range: {key}"
        raise ValueError(msg)
    return key


class MockCluster:
    """One librdkafka mock cluster, owned by this process; calls are serialized."""

    def __init__(self, brokers: int = 1) -> None:
        if brokers < 1:
            msg = "a mock cluster needs at least one broker"
            raise ValueError(msg)
        self._lib = librdkafka()
        self._lock = threading.Lock()
        self.brokers = brokers
        lib = self._lib
        conf = lib.rd_kafka_conf_new()
        errstr = ctypes.create_string_buffer(512)
        # The handle only hosts the cluster; it connects nowhere, so keep its
        # "no bootstrap.servers" notice out of the log (warnings stay).
        for key, value in (("client.id", "amends-devbroker"), ("log_level", "4")):
            if lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), errstr, 512) != 0:
                lib.rd_kafka_conf_destroy(conf)
                msg = f"librdkafka configuration {key}: {errstr.value.decode()}"
                raise UsageError(msg)
        rk = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, 512)
        if not rk:
            lib.rd_kafka_conf_destroy(conf)
            msg = f"librdkafka handle: {errstr.value.decode()}"
            raise UsageError(msg)
        mcluster = lib.rd_kafka_mock_cluster_new(rk, brokers)
        if not mcluster:
            lib.rd_kafka_destroy(rk)
            msg = "librdkafka could not create the mock cluster"
            raise UsageError(msg)
        self._rk: int | None = rk
        self._mc: int | None = mcluster
        self.bootstrap: str = lib.rd_kafka_mock_cluster_bootstraps(mcluster).decode()

    # -- helpers
    def _handle(self) -> int:
        if self._mc is None:
            msg = "mock cluster is closed"
            raise RuntimeError(msg)
        return self._mc

    def _fn(self, name: str) -> Any:
        if not hasattr(self._lib, name):
            msg = f"{name} is not in the bundled librdkafka {librdkafka_version()}"
            raise NotImplementedError(msg)
        return getattr(self._lib, name)

    def _check(self, what: str, code: int) -> None:
        if code != 0:
            raw = self._lib.rd_kafka_err2str(code)
            raise MockError(what, code, error_name(code), raw.decode() if raw else "")

    # -- topics
    def create_topic(self, topic: str, partitions: int, replication_factor: int = 1) -> None:
        with self._lock:
            code = self._fn("rd_kafka_mock_topic_create")(
                self._handle(), topic.encode(), partitions, replication_factor
            )
        self._check(f"create topic {topic}", code)

    def delete_topic(self, topic: str) -> None:
        with self._lock:
            code = self._fn("rd_kafka_mock_topic_delete")(self._handle(), topic.encode())
        self._check(f"delete topic {topic}", code)

    def set_topic_error(self, topic: str, code: int) -> None:
        with self._lock:
            self._fn("rd_kafka_mock_topic_set_error")(self._handle(), topic.encode(), code)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> None:
        with self._lock:
            code = self._fn("rd_kafka_mock_partition_delete_records")(
                self._handle(), topic.encode(), partition, before_offset
            )
        self._check(f"delete records {topic}[{partition}] before {before_offset}", code)

    # -- brokers
    def broker_down(self, broker: int) -> None:
        with self._lock:
            code = self._fn("rd_kafka_mock_broker_set_down")(self._handle(), broker)
        self._check(f"broker {broker} down", code)

    def broker_up(self, broker: int) -> None:
        with self._lock:
            code = self._fn("rd_kafka_mock_broker_set_up")(self._handle(), broker)
        self._check(f"broker {broker} up", code)

    def set_rtt(self, broker: int, rtt_ms: int) -> None:
        with self._lock:
            code = self._fn("rd_kafka_mock_broker_set_rtt")(self._handle(), broker, rtt_ms)
        self._check(f"broker {broker} rtt", code)

    # -- request errors and tracking
    def push_request_errors(self, key: int, errors: Sequence[int]) -> None:
        arr = (ctypes.c_int * len(errors))(*errors)
        with self._lock:
            self._fn("rd_kafka_mock_push_request_errors_array")(
                self._handle(), key, len(errors), arr
            )

    def clear_request_errors(self, key: int) -> None:
        with self._lock:
            self._fn("rd_kafka_mock_clear_request_errors")(self._handle(), key)

    def track_requests(self, enabled: bool) -> None:
        name = (
            "rd_kafka_mock_start_request_tracking"
            if enabled
            else "rd_kafka_mock_stop_request_tracking"
        )
        with self._lock:
            self._fn(name)(self._handle())

    def requests(self, clear: bool = False) -> list[tuple[int, int, int]]:
        """Tracked requests as (broker id, api key, timestamp in microseconds)."""
        cnt = ctypes.c_size_t(0)
        out: list[tuple[int, int, int]] = []
        with self._lock:
            mc = self._handle()
            arr = self._fn("rd_kafka_mock_get_requests")(mc, ctypes.byref(cnt))
            if arr:
                lib = self._lib
                for i in range(cnt.value):
                    req = arr[i]
                    out.append(
                        (
                            lib.rd_kafka_mock_request_id(req),
                            lib.rd_kafka_mock_request_api_key(req),
                            lib.rd_kafka_mock_request_timestamp(req),
                        )
                    )
                lib.rd_kafka_mock_request_destroy_array(arr, cnt.value)
            if clear:
                self._fn("rd_kafka_mock_clear_requests")(mc)
        return out

    def close(self) -> None:
        with self._lock:
            mc, rk = self._mc, self._rk
            self._mc = self._rk = None
            if mc is not None:
                self._lib.rd_kafka_mock_cluster_destroy(mc)
            if rk is not None:
                self._lib.rd_kafka_destroy(rk)
