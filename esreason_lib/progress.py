"""Progress bars: `progress_bar` is `tqdm.auto.tqdm` whose notebook widget leaves its final state in the file.

In a Jupyter kernel with ipywidgets, `tqdm.auto` draws a widget. Its `text/plain` fallback, which an executed
notebook's file keeps (papermill, nbconvert, JupyterLab showing an untrusted notebook) is the bar as first
drawn ("0% 0/150"); the widget's later updates go to the live view only. `progress_bar` displays the widget
under a display id and, when the bar closes, updates that display: the file then holds the final line
("100% 150/150 ..."), or nothing for a `leave=False` bar. On a terminal it is plain tqdm.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tqdm.auto import tqdm
from tqdm.notebook import tqdm as notebook_tqdm


class _NotebookBar(notebook_tqdm):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{**kwargs, "display": False})
        self._handle = None
        if not self.disable:
            from IPython.display import display

            self._handle = display(self.container, display_id=True)
            self.displayed = True

    def close(self):
        closed = self.disable or self._handle is None
        super().close()
        if closed:
            return
        if self.leave or (self.total and self.n < self.total):  # kept, as tqdm keeps an interrupted bar
            self._handle.update(self.container)
        else:
            self._handle.update({}, raw=True)
        self._handle = None


def progress_bar(iterable=None, **kwargs):
    """`tqdm.auto.tqdm(iterable, **kwargs)`; in a notebook, a widget whose final state is what the saved notebook
    shows (see the module docstring)."""
    bar_class = _NotebookBar if issubclass(tqdm, notebook_tqdm) else tqdm
    return bar_class(iterable, **kwargs)


def say(line: str) -> None:
    """One status line: on stderr in a terminal (stdout stays for results a script reads), as the cell's output in
    a notebook (where stderr shows as an error stream)."""
    print(line, file=sys.stdout if issubclass(tqdm, notebook_tqdm) else sys.stderr)


REUSED_LINE = ("esreason: {n} run(s) found complete in the store (the same config, task and seed): reused, not "
               "trained again")
"""The one line a notebook cell prints for the runs it found complete (`say_reused`)."""
NO_UPDATE_LINE = "esreason: {n} run(s) learned nothing in most iterations; the first: {first}"
"""The one line a notebook cell prints for the runs that ended saying they learned nothing (`say_no_update`)."""
_cell: dict[str, list[str]] = {"reused": [], "no update": []}
"""What the running notebook cell said, by kind, for its summary lines (`_flush_cell`)."""


def _in_notebook() -> bool:
    return issubclass(tqdm, notebook_tqdm)


def _flush_cell(*_) -> None:
    """At the end of a notebook cell: one `REUSED_LINE` and one `NO_UPDATE_LINE` for what the cell said, then
    nothing pending."""
    if _cell["reused"]:
        print(REUSED_LINE.format(n=len(_cell["reused"])), file=sys.stdout)
    if _cell["no update"]:
        print(NO_UPDATE_LINE.format(n=len(_cell["no update"]), first=_cell["no update"][0]), file=sys.stdout)
    for items in _cell.values():
        items.clear()


def _count_in_cell(kind: str, item: str) -> bool:
    """In a notebook kernel: count `item` for the cell's summary line (`_flush_cell`, registered once) and return
    True; False on a terminal or outside a kernel (the caller says it now)."""
    if not _in_notebook():
        return False
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return False
    if _flush_cell not in shell.events.callbacks["post_run_cell"]:
        shell.events.register("post_run_cell", _flush_cell)
    _cell[kind].append(item)
    return True


def say_reused(path) -> None:
    """A run found complete in the store (`path`, its folder): on a terminal one line naming it now; in a notebook
    counted, and one line per cell when the cell ends (`REUSED_LINE`, no path), so that an executed notebook holds
    a summary rather than a line with an absolute path per run."""
    if not _count_in_cell("reused", Path(str(path)).name):
        say(f"esreason: {path} is complete (the same config, task and seed): reused, not trained again")


def say_no_update(note: str) -> None:
    """A run that ended having learned nothing (`learning_signal.es_note` / `grpo_note`): on a terminal one line on
    stderr now; in a notebook one `NO_UPDATE_LINE` per cell, with the first run's note."""
    if not _count_in_cell("no update", note):
        say(f"esreason: {note}")
