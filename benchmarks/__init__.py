"""Reproducible measurements of amends; `make bench` / `amends bench` runs them all."""
