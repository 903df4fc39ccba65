"""What a Kafka operation raises when it fails (a refusal of the settings is
``settings.KafkaRefused``, a usage error). Below both ``settings`` and ``topics``, which
raise them; ``topics`` exports them too, where their callers have always found them."""

from __future__ import annotations


class KafkaError(Exception):
    """A Kafka operation failed; the message says which and why, in one line."""


class KafkaUnavailable(KafkaError):
    """The cluster could not be reached or did not answer in time."""


class OffsetLost(KafkaError):
    """A read started at an offset the partition no longer retains."""
