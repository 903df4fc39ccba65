"""The development broker: librdkafka's mock cluster hosted in its own process.

No Kafka or Redpanda server can be installed on the development machines, but
the librdkafka shipped inside the confluent-kafka wheel contains a mock cluster
that speaks the Kafka protocol over TCP on loopback. This module runs it as a
long-lived foreground process (``serve``; ``amends broker`` and
``python -m amends_pipeline.kafka.devbroker`` both end up there) that creates
topics, prints ``bootstrap=...``, writes a JSON state file, answers control
commands (``brokerctl``) and stops cleanly on SIGTERM/SIGINT. The ctypes
binding is ``mockcluster``; starting such a process for tests and tools is
``devbroker_launcher`` (``DevBroker``).

Everything else talks to the broker only through confluent-kafka and the
bootstrap address, so a real cluster is a configuration change. Limits: see
docs/devbroker.md (memory only, about 5 MiB retained per partition, no
CreateTopics/DescribeTopics, no topic IDs).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hmac
import ipaddress
import json
import os
import re
import secrets
import signal
import socket
import socketserver
import struct
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from amends_pipeline.errors import UsageError
from amends_pipeline.kafka.brokerctl import (
    BrokerControl,
    BrokerControlError,
    is_unix_address,
    split_host_port,
)
from amends_pipeline.kafka.devbroker_launcher import DevBroker
from amends_pipeline.kafka.mockcluster import (
    API_NAMES,
    INT32,
    INT64,
    RETENTION_BYTES,
    MockCluster,
    MockError,
    api_key,
    error_code,
    error_name,
    has_symbol,
    librdkafka_version,
)

# Kafka's legal topic names.
TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
CONTROL_MAX_LINE = 64 * 1024
"""Longest control request line (bytes); a longer one is refused and its connection closed."""
CONTROL_MAX_CONNECTIONS = 8
"""Control connections served at once; more are refused at once (no thread is started)."""
CONTROL_IDLE_S = 30
"""A control connection that sends nothing for this long is closed."""
CONTROL_MAX_ERRORS = 1024
"""Most error codes one push-request-errors may queue."""


def parse_topic(spec: str) -> tuple[str, int]:
    """``NAME:PARTITIONS`` (``NAME`` alone means one partition)."""
    name, sep, count = spec.rpartition(":")
    if not sep:
        name, count = spec, "1"
    if not TOPIC_RE.match(name) or name in (".", ".."):
        msg = f"--topic {spec!r}: topic names are 1-249 of [A-Za-z0-9._-]"
        raise UsageError(msg)
    if not count.isdigit() or not 1 <= int(count) <= 10_000:
        msg = f"--topic {spec!r}: PARTITIONS must be a whole number from 1 to 10000"
        raise UsageError(msg)
    return name, int(count)


def is_loopback_host(host: str) -> bool:
    """True for a loopback IP address (127.0.0.0/8, ::1), or ``localhost`` resolving only to loopback."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    if host.lower().rstrip(".") != "localhost":
        return False
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    addrs = {str(info[4][0]).split("%")[0] for info in infos}
    return bool(addrs) and all(ipaddress.ip_address(a).is_loopback for a in addrs)


def parse_control(spec: str) -> tuple[str, Any]:
    """("unix", path) or ("tcp", (host, port)); TCP only on loopback."""
    if is_unix_address(spec):
        path = Path(spec)
        if not path.parent.is_dir():
            msg = f"--control {spec}: directory {path.parent} does not exist"
            raise UsageError(msg)
        return "unix", str(path)
    try:
        host, port = split_host_port(spec)
    except ValueError as e:
        msg = f"--control {e}"
        raise UsageError(msg) from None
    if not is_loopback_host(host):
        msg = (
            f"--control {spec}: the control channel listens on loopback only (127.0.0.0/8, ::1,"
            " localhost); its token protects it from other local users, not from the network"
        )
        raise UsageError(msg)
    if port > 65535:
        msg = f"--control {spec}: port out of range"
        raise UsageError(msg)
    return "tcp", (host, port)


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Replace ``path`` with ``data`` as JSON, readable by the owner only (mode 0600).

    The temporary file is made by ``mkstemp`` in the same directory (unpredictable
    name, created exclusively with mode 0600), then renamed over ``path``: a reader
    sees the old file or the new one, and the token is never readable by others.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _field(
    req: Mapping[str, Any], name: str, kind: type, default: Any = ...,
    bounds: tuple[int, int] = INT32,
) -> Any:
    """A request field of type ``kind``; integers must lie in ``bounds`` (default: a C int)."""
    if name not in req:
        if default is ...:
            msg = f"missing field {name!r}"
            raise ValueError(msg)
        return default
    value = req[name]
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            msg = f"field {name!r} must be an integer"
            raise ValueError(msg)
        lo, hi = bounds
        if not lo <= value <= hi:
            msg = f"field {name!r} out of range: {value} (expected {lo}..{hi})"
            raise ValueError(msg)
    if kind is str and not isinstance(value, str):
        msg = f"field {name!r} must be a string"
        raise ValueError(msg)
    return value


def _topic_field(req: Mapping[str, Any]) -> str:
    """The ``topic`` field, a legal topic name (no NUL or other bytes C would cut at)."""
    topic: str = _field(req, "topic", str)
    if not TOPIC_RE.match(topic):
        msg = f"illegal topic name {topic[:80]!r}: 1-249 of [A-Za-z0-9._-]"
        raise ValueError(msg)
    return topic


class BrokerServer:
    """State and command dispatch of one running development broker."""

    def __init__(self, cluster: MockCluster, state_file: Path | None) -> None:
        self.cluster = cluster
        self.state_file = state_file
        self.topics: dict[str, int] = {}
        self.down: set[int] = set()
        self.control_address = ""
        self.started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self.stop_event = threading.Event()
        self.stop_reason = ""
        self._state_lock = threading.Lock()
        self._cmd_lock = threading.Lock()  # one control command at a time
        self.token = secrets.token_hex(32)
        """Required in every control request; written only to the private state file."""

    def state(self) -> dict[str, Any]:
        return {
            "bootstrap": self.cluster.bootstrap,
            "control": self.control_address,
            "pid": os.getpid(),
            "brokers": self.cluster.brokers,
            "broker_ids": list(range(1, self.cluster.brokers + 1)),
            "down_brokers": sorted(self.down),
            "topics": dict(sorted(self.topics.items())),
            "librdkafka": librdkafka_version(),
            "started_at": self.started_at,
            "token": self.token,
        }

    def save_state(self) -> None:
        if self.state_file is None:
            return
        with self._state_lock:
            write_json_atomic(self.state_file, self.state())

    def create_topic(self, name: str, partitions: int, replication_factor: int = 1) -> None:
        if not TOPIC_RE.match(name):
            msg = f"illegal topic name {name!r}"
            raise ValueError(msg)
        if not 1 <= partitions <= 10_000:
            msg = "partitions must be from 1 to 10000"
            raise ValueError(msg)
        self.cluster.create_topic(name, partitions, replication_factor)
        self.topics[name] = partitions

    def _broker_id(self, req: Mapping[str, Any]) -> int:
        broker: int = _field(req, "broker", int, bounds=(-1, 64))
        if broker != -1 and not 1 <= broker <= self.cluster.brokers:
            msg = f"no broker {broker}; ids are 1..{self.cluster.brokers}, or -1 for all"
            raise ValueError(msg)
        return broker

    def handle(self, req: Mapping[str, Any], *, peer_is_owner: bool = False) -> dict[str, Any]:
        """Run one control command; never raises.

        ``peer_is_owner``: the request came over the unix socket from a process of
        the broker's own user (kernel-checked peer credentials); it needs no token.
        """
        if not isinstance(req, Mapping):
            return {"ok": False, "error": "a request is a JSON object with a 'cmd' field"}
        if not peer_is_owner and not self.authorized(req):
            return {"ok": False, "error": UNAUTHORIZED}
        cmd = req.get("cmd")
        handler = _COMMANDS.get(cmd) if isinstance(cmd, str) else None
        if handler is None:
            return {
                "ok": False,
                "error": f"unknown command {cmd!r}; commands: {', '.join(sorted(_COMMANDS))}",
            }
        try:
            with self._cmd_lock:
                reply = handler(self, req)
        except MockError as e:
            return {"ok": False, "error": str(e), "code": e.code, "name": e.name}
        except (ValueError, NotImplementedError, RuntimeError) as e:
            return {"ok": False, "error": str(e)}
        return {"ok": True, **reply}

    def authorized(self, req: Mapping[str, Any]) -> bool:
        """The request carries this broker's token (compared in constant time)."""
        token = req.get("token")
        return isinstance(token, str) and hmac.compare_digest(token.encode(), self.token.encode())

    # -- commands
    def cmd_ping(self, req: Mapping[str, Any]) -> dict[str, Any]:
        return {"pid": os.getpid(), "bootstrap": self.cluster.bootstrap}

    def cmd_status(self, req: Mapping[str, Any]) -> dict[str, Any]:
        return self.state()

    def cmd_create_topic(self, req: Mapping[str, Any]) -> dict[str, Any]:
        topic = _topic_field(req)
        partitions = _field(req, "partitions", int, 1, bounds=(1, 10_000))
        rf = _field(req, "replication_factor", int, 1, bounds=(1, self.cluster.brokers))
        self.create_topic(topic, partitions, rf)
        self.save_state()
        return {"topic": topic, "partitions": partitions}

    def cmd_delete_topic(self, req: Mapping[str, Any]) -> dict[str, Any]:
        topic = _topic_field(req)
        self.cluster.delete_topic(topic)
        self.topics.pop(topic, None)
        self.save_state()
        return {"topic": topic}

    def cmd_broker_down(self, req: Mapping[str, Any]) -> dict[str, Any]:
        broker = self._broker_id(req)
        self.cluster.broker_down(broker)
        ids = range(1, self.cluster.brokers + 1) if broker == -1 else [broker]
        self.down.update(ids)
        self.save_state()
        return {"broker": broker, "down_brokers": sorted(self.down)}

    def cmd_broker_up(self, req: Mapping[str, Any]) -> dict[str, Any]:
        broker = self._broker_id(req)
        self.cluster.broker_up(broker)
        if broker == -1:
            self.down.clear()
        else:
            self.down.discard(broker)
        self.save_state()
        return {"broker": broker, "down_brokers": sorted(self.down)}

    def cmd_set_rtt(self, req: Mapping[str, Any]) -> dict[str, Any]:
        broker = self._broker_id(req)
        rtt = _field(req, "rtt_ms", int, bounds=(0, 3_600_000))
        self.cluster.set_rtt(broker, rtt)
        return {"broker": broker, "rtt_ms": rtt}

    def cmd_push_request_errors(self, req: Mapping[str, Any]) -> dict[str, Any]:
        key = api_key(req.get("api_key", ""))
        raw = req.get("errors")
        if not isinstance(raw, list) or not raw:
            msg = "field 'errors' must be a non-empty list of error codes or names"
            raise ValueError(msg)
        if len(raw) > CONTROL_MAX_ERRORS:
            msg = f"field 'errors' has {len(raw)} entries; at most {CONTROL_MAX_ERRORS}"
            raise ValueError(msg)
        codes = [error_code(e) for e in raw]
        self.cluster.push_request_errors(key, codes)
        return {
            "api_key": key,
            "api": API_NAMES.get(key, str(key)),
            "errors": [error_name(c) for c in codes],
        }

    def cmd_clear_request_errors(self, req: Mapping[str, Any]) -> dict[str, Any]:
        key = api_key(req.get("api_key", ""))
        self.cluster.clear_request_errors(key)
        return {"api_key": key}

    def cmd_topic_error(self, req: Mapping[str, Any]) -> dict[str, Any]:
        topic = _topic_field(req)
        code = error_code(req.get("error", 0))
        self.cluster.set_topic_error(topic, code)
        return {"topic": topic, "error": error_name(code)}

    def cmd_delete_records(self, req: Mapping[str, Any]) -> dict[str, Any]:
        topic = _topic_field(req)
        partition = _field(req, "partition", int, bounds=(0, INT32[1]))
        offset = _field(req, "offset", int, bounds=(0, INT64[1]))
        self.cluster.delete_records(topic, partition, offset)
        return {"topic": topic, "partition": partition, "low_watermark": offset}

    def cmd_track_requests(self, req: Mapping[str, Any]) -> dict[str, Any]:
        enabled = req.get("enabled", True)
        if not isinstance(enabled, bool):
            msg = "field 'enabled' must be true or false"
            raise ValueError(msg)
        self.cluster.track_requests(enabled)
        return {"enabled": enabled}

    def cmd_requests(self, req: Mapping[str, Any]) -> dict[str, Any]:
        clear = req.get("clear", False)
        if not isinstance(clear, bool):
            msg = "field 'clear' must be true or false"
            raise ValueError(msg)
        reqs = self.cluster.requests(clear=clear)
        counts: dict[str, int] = {}
        for _, key, _ in reqs:
            name = API_NAMES.get(key, str(key))
            counts[name] = counts.get(name, 0) + 1
        return {
            "counts": counts,
            "requests": [
                {"broker": b, "api_key": k, "api": API_NAMES.get(k, str(k)), "ts_us": ts}
                for b, k, ts in reqs
            ],
        }

    def cmd_stop(self, req: Mapping[str, Any]) -> dict[str, Any]:
        self.stop_reason = "stop command"
        # Set after the reply is written (see _ControlHandler).
        return {"stopping": True}


_COMMANDS = {
    "ping": BrokerServer.cmd_ping,
    "status": BrokerServer.cmd_status,
    "create-topic": BrokerServer.cmd_create_topic,
    "delete-topic": BrokerServer.cmd_delete_topic,
    "broker-down": BrokerServer.cmd_broker_down,
    "broker-up": BrokerServer.cmd_broker_up,
    "set-rtt": BrokerServer.cmd_set_rtt,
    "push-request-errors": BrokerServer.cmd_push_request_errors,
    "clear-request-errors": BrokerServer.cmd_clear_request_errors,
    "topic-error": BrokerServer.cmd_topic_error,
    "delete-records": BrokerServer.cmd_delete_records,
    "track-requests": BrokerServer.cmd_track_requests,
    "requests": BrokerServer.cmd_requests,
    "stop": BrokerServer.cmd_stop,
}


UNAUTHORIZED = "refused: missing or wrong control token (it is in the broker's state file)"


class _ControlHandler(socketserver.StreamRequestHandler):
    timeout = CONTROL_IDLE_S

    def _reply(self, reply: Mapping[str, Any]) -> None:
        self.wfile.write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
        self.wfile.flush()

    def _peer_is_owner(self) -> bool:
        """A unix-socket peer running as this process's user (SO_PEERCRED); False on TCP."""
        if getattr(socket, "SO_PEERCRED", None) is None or self.request.family != socket.AF_UNIX:
            return False
        try:
            raw = self.request.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            return False
        _pid, uid, _gid = struct.unpack("3i", raw)
        return bool(uid == os.getuid())

    def handle(self) -> None:
        broker: BrokerServer = self.server.broker  # type: ignore[attr-defined]
        owner = self._peer_is_owner()
        while True:
            try:
                raw = self.rfile.readline(CONTROL_MAX_LINE + 1)
            except OSError:  # idle too long, or the peer reset
                return
            if not raw:
                return
            if len(raw) > CONTROL_MAX_LINE:
                self._reply({"ok": False, "error": f"request line longer than {CONTROL_MAX_LINE} bytes"})
                return  # the rest of the line is never read
            if not raw.strip():
                continue
            try:
                req = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                reply: dict[str, Any] = {"ok": False, "error": f"not JSON: {e}"}
            else:
                reply = broker.handle(req, peer_is_owner=owner)
            self._reply(reply)
            if reply.get("error") == UNAUTHORIZED:
                return
            if reply.get("ok") and isinstance(req, dict) and req.get("cmd") == "stop":
                broker.stop_event.set()
                return


class _ControlServer:
    """Bounded threading: at most CONTROL_MAX_CONNECTIONS handler threads at a time."""

    broker: BrokerServer
    _slots = threading.BoundedSemaphore(CONTROL_MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(b'{"ok":false,"error":"too many control connections; retry"}\n')
            except OSError:
                pass
            self.shutdown_request(request)  # type: ignore[attr-defined]
            return
        try:
            super().process_request(request, client_address)  # type: ignore[misc]
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[misc]
        finally:
            self._slots.release()


class _TCPControl(_ControlServer, socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class _TCP6Control(_TCPControl):
    address_family = socket.AF_INET6


class _UnixControl(_ControlServer, socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


def _claim_unix_socket(path: str) -> None:
    """Remove a stale socket file; refuse if a live broker answers on it."""
    if not os.path.exists(path):
        return
    import stat

    if not stat.S_ISSOCK(os.lstat(path).st_mode):
        msg = f"--control {path}: exists and is not a socket"
        raise UsageError(msg)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)  # nobody listens: stale
    else:
        msg = f"--control {path}: another process is listening on it"
        raise UsageError(msg)
    finally:
        probe.close()


def _check_state_file(path: Path) -> None:
    """Refuse to overwrite the state file of a broker that still answers."""
    if not path.exists():
        if not path.parent.is_dir():
            msg = f"--state-file {path}: directory {path.parent} does not exist"
            raise UsageError(msg)
        return
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        reply = BrokerControl(state["control"], timeout=2.0, token=state.get("token")).send(
            {"cmd": "ping"}
        )
    except (OSError, ValueError, KeyError, TypeError, BrokerControlError):
        return  # stale
    if reply.get("ok"):
        msg = f"--state-file {path}: a broker is running there (pid {reply.get('pid')})"
        raise UsageError(msg)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME:PARTITIONS",
        help="create this topic at start (repeatable)",
    )
    parser.add_argument(
        "--brokers",
        type=int,
        default=1,
        metavar="N",
        help="number of mock brokers, ids 1..N (default 1)",
    )
    parser.add_argument(
        "--state-file",
        metavar="PATH",
        help="write bootstrap, control address, pid and topics here as JSON once ready; "
        "removed on exit",
    )
    parser.add_argument(
        "--control",
        default="127.0.0.1:0",
        metavar="HOST:PORT|SOCKET",
        help="control channel: loopback HOST:PORT (port 0 picks one) or a unix socket path "
        "(default 127.0.0.1:0)",
    )
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="stop when the process that started this one exits (used by DevBroker)",
    )


def serve(args: argparse.Namespace) -> int:
    """Run the broker in the foreground until SIGTERM, SIGINT or the stop command."""
    topics = [parse_topic(t) for t in args.topic]
    names = [n for n, _ in topics]
    if len(set(names)) != len(names):
        msg = "--topic: a topic is named twice"
        raise UsageError(msg)
    if not 1 <= args.brokers <= 64:
        msg = "--brokers must be from 1 to 64"
        raise UsageError(msg)
    kind, where = parse_control(args.control)
    state_file = Path(args.state_file).resolve() if args.state_file else None
    if state_file is not None:
        _check_state_file(state_file)
    if kind == "unix":
        _claim_unix_socket(where)
    parent = os.getppid()

    stop = threading.Event()
    server_reason = [""]

    def on_signal(signum: int, _frame: Any) -> None:
        server_reason[0] = signal.Signals(signum).name
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    cluster: MockCluster | None = None
    control: _TCPControl | _UnixControl | None = None
    control_thread: threading.Thread | None = None
    broker: BrokerServer | None = None
    try:
        try:
            cluster = MockCluster(args.brokers)
        except ValueError as e:
            raise UsageError(str(e)) from None
        broker = BrokerServer(cluster, state_file)
        broker.stop_event = stop
        for name, partitions in topics:
            try:
                broker.create_topic(name, partitions)
            except MockError as e:
                msg = f"--topic {name}: {e}"
                raise UsageError(msg) from None
        try:
            if kind == "unix":
                control = _UnixControl(where, _ControlHandler)
                os.chmod(where, 0o600)
                broker.control_address = where
            else:
                host, port = where
                server_class = _TCP6Control if ":" in host else _TCPControl
                control = server_class((host, port), _ControlHandler)
                bound_host, bound_port = str(control.server_address[0]), control.server_address[1]
                if ":" in bound_host:
                    bound_host = f"[{bound_host}]"
                broker.control_address = f"{bound_host}:{bound_port}"
        except OSError as e:
            msg = f"--control {args.control}: {e}"
            raise UsageError(msg) from None
        control.broker = broker
        control_thread = threading.Thread(
            target=control.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        control_thread.start()
        broker.save_state()
        print(f"bootstrap={cluster.bootstrap}", flush=True)
        print(
            f"amends broker: ready: bootstrap={cluster.bootstrap} "
            f"control={broker.control_address} pid={os.getpid()} "
            f"librdkafka={librdkafka_version()}",
            file=sys.stderr,
            flush=True,
        )
        while not stop.wait(0.25):
            if args.exit_with_parent and os.getppid() != parent:
                server_reason[0] = "parent exited"
                stop.set()
        reason = server_reason[0] or broker.stop_reason or "stop"
        print(f"amends broker: stopping ({reason})", file=sys.stderr, flush=True)
    finally:
        if control is not None:
            if control_thread is not None:
                control.shutdown()  # blocks unless serve_forever runs
            control.server_close()
            if kind == "unix":
                try:
                    os.unlink(where)
                except FileNotFoundError:
                    pass
        if cluster is not None:
            cluster.close()
        if state_file is not None and broker is not None:
            try:
                state = json.loads(state_file.read_text(encoding="utf-8"))
                if state.get("pid") == os.getpid():
                    state_file.unlink()
            except (OSError, ValueError):
                pass
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m amends_pipeline.kafka.devbroker",
        description="Run the development Kafka broker (librdkafka mock cluster) in the "
        "foreground; same as `amends broker`.",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return serve(args)
    except UsageError as e:
        print(f"amends broker: {e}", file=sys.stderr)
        return 2


__all__ = [
    "CONTROL_IDLE_S",
    "CONTROL_MAX_CONNECTIONS",
    "CONTROL_MAX_ERRORS",
    "CONTROL_MAX_LINE",
    "RETENTION_BYTES",  # re-exported from mockcluster: tests import it from here
    "TOPIC_RE",
    "UNAUTHORIZED",
    "BrokerServer",
    "DevBroker",  # re-exported from devbroker_launcher: tests and benchmarks import it from here
    "add_arguments",
    "has_symbol",  # re-exported from mockcluster: tests import it from here
    "is_loopback_host",
    "main",
    "parse_control",
    "parse_topic",
    "serve",
    "write_json_atomic",
]


if __name__ == "__main__":
    sys.exit(main())
