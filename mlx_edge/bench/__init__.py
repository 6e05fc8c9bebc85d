"""`mlx-edge bench`: the same model, weights and inputs on every backend present, side by side.

from mlx_edge.bench import bench, format_table
report = bench(model="tiny")
print(format_table(report))
"""

from mlx_edge.bench.report import format_table, write_json, write_plot
from mlx_edge.bench.run import bench

__all__ = ["bench", "format_table", "write_json", "write_plot"]
