"""Client for the development broker's control channel.

The channel carries line-delimited JSON: one object per request line, one object
per reply line. Every reply has ``"ok"``; a failed command has ``"ok": false``
and ``"error"``. Every request carries the broker's ``"token"``, a random value
the broker writes only into its state file (mode 0600); ``from_state_file``
reads both address and token, and ``--control ADDRESS`` takes the token from
``AMENDS_BROKER_TOKEN``. The address is ``HOST:PORT`` (TCP on loopback) or a filesystem
path (a unix socket), as written in the broker's state file under ``control``.

Shell use::

    python -m amends_pipeline.kafka.brokerctl --state-file broker.json broker-down broker=1
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TOKEN_ENV = "AMENDS_BROKER_TOKEN"
MAX_REPLY = 64 * 1024 * 1024
"""Longest reply line read (a ``requests`` listing can be long); longer is an error."""


class BrokerControlError(Exception):
    """The broker answered a control command with ``ok: false``, or not at all."""

    def __init__(self, message: str, reply: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.reply = reply or {}


def is_unix_address(address: str) -> bool:
    """A control address naming a unix socket (a path) rather than HOST:PORT."""
    return "/" in address or address.endswith(".sock")


def split_host_port(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        msg = f"control address {address!r} is neither HOST:PORT nor a socket path"
        raise ValueError(msg)
    return host.strip("[]"), int(port)


class BrokerControl:
    """Sends control commands; one short connection per command."""

    def __init__(self, address: str, timeout: float = 15.0, token: str | None = None) -> None:
        self.address = address
        self.timeout = timeout
        self.token = token

    @classmethod
    def from_state_file(cls, path: str | Path, timeout: float = 15.0) -> BrokerControl:
        state = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(state["control"], timeout=timeout, token=state.get("token"))

    def _connect(self) -> socket.socket:
        if is_unix_address(self.address):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target: Any = self.address
        else:
            host, port = split_host_port(self.address)
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            target = (host, port)
        sock.settimeout(self.timeout)
        try:
            sock.connect(target)
        except OSError:
            sock.close()
            raise
        return sock

    def send(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request object, return the reply object whatever its ``ok``."""
        if self.token is not None and "token" not in request:
            request = {**request, "token": self.token}
        line = json.dumps(request, separators=(",", ":")).encode() + b"\n"
        try:
            with self._connect() as sock:
                sock.sendall(line)
                with sock.makefile("rb") as f:
                    raw = f.readline(MAX_REPLY + 1)
        except OSError as e:
            msg = f"control channel {self.address}: {e}"
            raise BrokerControlError(msg) from e
        if not raw:
            msg = f"control channel {self.address}: closed without a reply"
            raise BrokerControlError(msg)
        if len(raw) > MAX_REPLY:
            msg = f"control channel {self.address}: reply longer than {MAX_REPLY} bytes"
            raise BrokerControlError(msg)
        reply: dict[str, Any] = json.loads(raw)
        return reply

    def request(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """Send ``cmd`` with ``fields``; raise BrokerControlError unless the reply is ok."""
        reply = self.send({"cmd": cmd, **fields})
        if not reply.get("ok"):
            msg = f"{cmd}: {reply.get('error', 'failed')}"
            raise BrokerControlError(msg, reply)
        return reply


def _parse_field(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        msg = f"expected KEY=VALUE, got {text!r}"
        raise ValueError(msg)
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m amends_pipeline.kafka.brokerctl",
        description="Send one command to a running development broker (amends broker).",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--state-file", help="the broker's state file")
    where.add_argument(
        "--control",
        help=f"control address: HOST:PORT or a unix socket path (token from {TOKEN_ENV})",
    )
    parser.add_argument("cmd", help="e.g. ping, status, create-topic, broker-down, stop")
    parser.add_argument(
        "fields", nargs="*", metavar="KEY=VALUE", help="command fields; VALUE is JSON or text"
    )
    args = parser.parse_args(argv)
    try:
        fields = dict(_parse_field(f) for f in args.fields)
        ctl = (
            BrokerControl.from_state_file(args.state_file)
            if args.state_file
            else BrokerControl(args.control, token=os.environ.get(TOKEN_ENV) or None)
        )
        reply = ctl.send({"cmd": args.cmd, **fields})
    except (ValueError, OSError, KeyError, BrokerControlError) as e:
        print(f"brokerctl: {e}", file=sys.stderr)
        return 2
    print(json.dumps(reply, indent=2, sort_keys=True))
    return 0 if reply.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
