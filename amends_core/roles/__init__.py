"""The role logic, written once: the worker, relay and view steps over the ports.

``amends_pipeline.roles`` wires PostgreSQL and Kafka adapters into these
classes; ``amends_core.pipeline`` wires the memory adapters; the simulator
drives them over memory adapters that inject its faults. Each step is bounded
and idempotent, and each role's resume contract is in its module.
"""
