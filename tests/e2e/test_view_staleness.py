"""A stale view never looks healthy: ``amends view`` marks stopped and lagging partitions.

Real processes on the real broker and PostgreSQL. Each scenario makes an output
partition stale the way it happens in operation (retention overtook a stopped
view: OutputLost; an equal version with other content on the output topic: a
protocol stop; the view role not running: lag), then runs ``amends view`` and
``amends view --certified`` as subprocesses: the plain display exits 0 but marks
the partition and every key in it, the certified display exits 1 and names the
recovery, and both go back to plain READY / exit 0 once the view is current.
"""

from __future__ import annotations

import json
import socket

import pytest
from confluent_kafka import Producer

from tests.e2e.conftest import Pipeline
from tests.e2e.test_output_compaction import (
    delete_output_records,
    load,
    output_end,
    output_log,
    role,
    set_output_policy,
    write_config,
)

K0, K1 = "PART-1/DEPOT-A", "PART-2/DEPOT-B"
"""The keys of write_config: K0 lives in partition 0, K1 in partition 1."""


def key_line(out: str, key: str) -> str:
    (line,) = [x for x in out.splitlines() if x.startswith(f"{key}: ")]
    return line


def view(p: Pipeline, *extra: str) -> tuple[int, str, str]:
    r = p.run("view", "--config", str(p.config), "--last", "0", *extra)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.slow
def test_a_view_that_lost_its_place_is_marked_stopped_and_not_certified_until_rebuilt(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    p.config = write_config(p.tmp)
    p.provision()
    set_output_policy(p, "compact,delete")  # a topic whose retention deletes
    load(p, "initial")
    p.roles_until_idle()
    stopped_at = output_end(p, 0)
    load(p, "amend")
    role(p, "worker")
    role(p, "relay")
    cut = output_end(p, 0)
    load(p, "amend-again")
    role(p, "worker")
    role(p, "relay")
    p.ok("role", "view", "--config", str(p.config), "--partition", "1", "--until-idle", "--quiet")
    log = output_log(p, 0)  # every output of the deleted stretch is published again after it
    assert {k for off, k, _ in log if stopped_at <= off < cut} <= {k for off, k, _ in log if off >= cut}
    delete_output_records(p, 0, cut)
    r = p.run("role", "view", "--config", str(p.config), "--partition", "0", "--until-idle")
    assert r.returncode == 1 and "OutputLost" in r.stderr

    code, out, err = view(p)
    assert code == 0, err
    assert (
        f"  PARTITION 0 stopped: OutputLost: the output log starts at offset {cut},"
        f" after the view frontier (frontier {stopped_at})"
    ) in out.splitlines()
    assert "PARTITION 1" not in out
    assert key_line(out, K0) == f"{K0}: READY (stale: partition 0 stopped: OutputLost, frontier {stopped_at})"
    assert key_line(out, K1) == f"{K1}: READY"

    code, out, err = view(p, "--certified")
    assert code == 1
    assert err.splitlines() == [
        f"amends view: not certified: output partition 0 stopped: OutputLost: the output log starts"
        f" at offset {cut}, after the view frontier (frontier {stopped_at});"
        f" `amends view --rebuild --config {p.config} --partition 0`, then `amends verify`"
    ]
    assert "stale: partition 0" in key_line(out, K0)
    # only the shown keys count: K1's partition is current
    code, out, err = view(p, "--certified", "--key", K1)
    assert (code, err) == (0, "")

    p.ok("view", "--config", str(p.config), "--rebuild", "--partition", "0")
    code, out, err = view(p, "--certified")
    assert (code, err) == (0, "")
    assert "PARTITION" not in out and "stale" not in out
    assert key_line(out, K0) == f"{K0}: READY"
    assert p.verify().returncode == 0


@pytest.mark.slow
def test_a_lagging_view_is_marked_with_its_lag_and_not_certified_until_the_view_role_catches_up(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    p.config = write_config(p.tmp)
    p.provision()
    load(p, "initial")
    p.roles_until_idle()
    frontier = {part: output_end(p, part) for part in (0, 1)}
    load(p, "amend")  # the view role is not running from here on
    role(p, "worker")
    role(p, "relay")
    end = {part: output_end(p, part) for part in (0, 1)}
    assert all(end[part] > frontier[part] for part in (0, 1))

    code, out, err = view(p)
    assert code == 0, err
    for part, key in ((0, K0), (1, K1)):
        lag = end[part] - frontier[part]
        assert f"  PARTITION {part} lagging {lag} (frontier {frontier[part]})" in out.splitlines()
        assert key_line(out, key) == (
            f"{key}: READY (stale: partition {part} lagging {lag}, frontier {frontier[part]})"
        )
    code, out, err = view(p, "--certified", "--key", K1)
    assert code == 1
    assert err.splitlines() == [
        f"amends view: not certified: output partition 1 lagging {end[1] - frontier[1]}"
        f" (frontier {frontier[1]}); run (or restart) `amends role view --config {p.config}`"
        " until it catches up"
    ]

    # Kafka unreachable: the lag is unknown, the display still works, nothing is certified
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        down = Pipeline(dict(p.env, AMENDS_KAFKA_BOOTSTRAP=f"127.0.0.1:{port}"), p.broker, p.tmp,
                        p.source_topic, p.output_topic, p.config)
        code, out, err = view(down)
        assert code == 0
        assert "  PARTITION 0 lag unknown: the output topic could not be read:" in out
        assert key_line(out, K0) == f"{K0}: READY (stale: partition 0 lag unknown, frontier {frontier[0]})"
        code, out, err = view(down, "--certified")
        assert code == 1
        assert "amends view: not certified: output partition 0 lag unknown" in err

    role(p, "view")
    code, out, err = view(p, "--certified")
    assert (code, err) == (0, "")
    assert "stale" not in out and "PARTITION" not in out


def test_a_partition_stopped_by_a_protocol_error_is_marked_with_the_diagnostic(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    p.config = write_config(p.tmp)
    p.provision()
    load(p, "initial")
    p.roles_until_idle()
    at = output_end(p, 0)
    _, key, value = output_log(p, 0)[-1]
    assert key is not None and value is not None
    forged = json.loads(value)
    forged["cause"]["offset"] += 1_000_000  # same output ID and version, other content
    producer = Producer({"bootstrap.servers": p.broker.bootstrap})
    producer.produce(p.output_topic, json.dumps(forged, separators=(",", ":")).encode(), key, partition=0)
    assert producer.flush(30) == 0
    r = p.run("role", "view", "--config", str(p.config), "--until-idle")
    assert r.returncode == 1 and "ViewStopped" in r.stderr

    code, out, err = view(p)
    assert code == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("  PARTITION 0 ")]
    assert line.startswith(f"  PARTITION 0 stopped: offset {at}: ") and line.endswith(f"(frontier {at})")
    assert key_line(out, K0) == f"{K0}: READY (stale: partition 0 stopped, frontier {at})"
    assert key_line(out, K1) == f"{K1}: READY"
    code, out, err = view(p, "--certified")
    assert code == 1
    (reason,) = err.splitlines()
    assert reason.startswith(f"amends view: not certified: output partition 0 stopped: offset {at}: ")
    assert f"`amends view --rebuild --config {p.config} --partition 0`" in reason
