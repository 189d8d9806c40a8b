"""The operations and retrospective dashboards (SPEC O5, O6): figures, charts, pages, the
live socket."""
