"""Independent full-history oracle: its own decoding route and whole-column Polars work.

It may depend only on ledger values, time formatting, the result shape and the
records format; an import-boundary test keeps fold, diff, view, process,
pipeline and the stores out of its reach.
"""

from amends_core.oracle.compute import OracleResult, compute
from amends_core.oracle.source import Columns, OracleInputError

__all__ = ["Columns", "OracleInputError", "OracleResult", "compute"]
