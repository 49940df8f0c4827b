"""Registers `format("riverlog")` with PySpark: Spark imports every installed module named
`pyspark_*` and registers its `DefaultSource` (pyspark ≥ 4.2), so installing riverlog is
enough — no `spark.dataSource.register` call, no jars."""

from riverlog.spark.source import RiverlogDataSource as DefaultSource

__all__ = ["DefaultSource"]
