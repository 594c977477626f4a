"""A run's progress on a terminal: one bar naming the case that runs, or, where stderr is a
log file or a pipe, one line per case (a bar there would be a screenful of escapes)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from attnbench.run.procedure import Progress as Silent


class ProgressBar(Silent):
    """`run.procedure.Progress` drawn with rich on `console` (stderr)."""

    def __init__(self, console: Console):
        self.console = console
        self.logged = not console.is_terminal
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        self.bar = Progress(*columns, console=console, transient=True)
        self.task = self.bar.add_task("starting")

    def status(self, text: str):
        return self.console.status(text)

    def start(self, total: int) -> None:
        self.bar.update(self.task, total=total)
        self.bar.start()

    def case(self, case, index: int, total: int) -> None:
        self._show(case.title, index - 1, index, total)

    def group(self, group: list, index: int, total: int) -> None:
        title = group[0].title + (f" and {len(group) - 1} more" if len(group) > 1 else "")
        self._show(title, index, index, total)

    def report(self, text: str) -> None:
        self.bar.update(self.task, description=text)

    def end(self) -> None:
        total = self.bar.tasks[0].total
        self.bar.update(self.task, completed=total)
        self.bar.stop()

    def _show(self, title: str, completed: int, index: int, total: int) -> None:
        self.bar.update(self.task, description=title, completed=completed)
        if self.logged:
            line = f"[{index}/{total}] {title}"
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)
