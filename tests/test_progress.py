"""`progress.say`: a status line goes to stderr in a terminal and to the cell's output in a notebook."""

from tqdm.notebook import tqdm as notebook_tqdm
from tqdm.std import tqdm as terminal_tqdm

from esreason_lib import progress


def _notebook_shell(monkeypatch):
    """Make `progress` see a notebook: a stand-in IPython shell whose cell-end callbacks the test calls itself, and
    the notebook progress bar."""
    import IPython

    class Events:
        def __init__(self):
            self.callbacks = {"post_run_cell": []}

        def register(self, name, callback):
            self.callbacks[name].append(callback)

    shell = type("Shell", (), {"events": Events()})()
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    monkeypatch.setattr(progress, "tqdm", notebook_tqdm)
    return shell


def test_say_writes_stderr_in_a_terminal_and_stdout_in_a_notebook(capsys, monkeypatch):
    monkeypatch.setattr(progress, "tqdm", terminal_tqdm)
    progress.say("reused")
    assert capsys.readouterr() == ("", "reused\n")
    monkeypatch.setattr(progress, "tqdm", notebook_tqdm)
    progress.say("reused")
    assert capsys.readouterr() == ("reused\n", "")


def test_reused_runs_are_one_line_per_cell_in_a_notebook_and_named_in_a_terminal(capsys, monkeypatch):

    monkeypatch.setattr(progress, "tqdm", terminal_tqdm)
    progress.say_reused("/abs/runs/es-1")
    assert capsys.readouterr() == ("", "esreason: /abs/runs/es-1 is complete (the same config, task and seed): "
                                       "reused, not trained again\n")

    shell = _notebook_shell(monkeypatch)
    progress.say_reused("/abs/runs/es-1")
    progress.say_reused("/abs/runs/grpo-2")
    assert capsys.readouterr() == ("", "") and len(shell.events.callbacks["post_run_cell"]) == 1  # registered once
    for callback in shell.events.callbacks["post_run_cell"]:  # the cell ends
        callback(None)
    out = capsys.readouterr().out
    assert out == progress.REUSED_LINE.format(n=2) + "\n" and "/abs" not in out
    shell.events.callbacks["post_run_cell"][0](None)  # the next cell found none: nothing
    assert capsys.readouterr() == ("", "")


def test_no_update_notes_are_one_line_per_cell_in_a_notebook(capsys, monkeypatch):

    monkeypatch.setattr(progress, "tqdm", terminal_tqdm)
    progress.say_no_update("ES made no update in 2 of 2 iterations")
    assert capsys.readouterr() == ("", "esreason: ES made no update in 2 of 2 iterations\n")

    shell = _notebook_shell(monkeypatch)
    for note in ("first note", "second note", "third note"):
        progress.say_no_update(note)
    progress.say_reused("/abs/runs/es-1")
    assert capsys.readouterr() == ("", "")
    shell.events.callbacks["post_run_cell"][0](None)
    assert capsys.readouterr().out.splitlines() == [
        progress.REUSED_LINE.format(n=1),
        "esreason: 3 run(s) learned nothing in most iterations; the first: first note"]
