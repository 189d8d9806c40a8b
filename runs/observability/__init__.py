"""What the console tells ops about its runs: traces, metrics, cost, the daily rollups and
the dashboards built on them (SPEC O1–O6), and a synthetic history to measure them on."""
