"""What a user sees of result rows: terminal tables, figures, comparisons, Markdown reports.
Views read rows; they never measure."""
