"""What a user sees of result rows: terminal tables, figures, comparisons, Markdown reports.
Views read rows; they never measure, and import nothing from cli, studies or run.

Every table and figure reads the frame of `rows_frame(rows)` / `read_rows(path)`, except the
maps figure (its rows hold arrays, which a frame never does). `labels` names backends,
`metrics` says which error metrics are errors (lower is closer), and `figures` is the
toolkit the figures share; `tables`, `plots`, `maps`, `pareto`, `compare` (with its text,
`compare_text`), `report`, `gradients` (error --mode fwdbwd's rows) and `training` (train's
logs) each make one kind of output.
"""
