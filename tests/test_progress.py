"""`progress.say`: a status line goes to stderr in a terminal and to the cell's output in a notebook."""

from tqdm.notebook import tqdm as notebook_tqdm
from tqdm.std import tqdm as terminal_tqdm

from esreason_lib import progress


def test_say_writes_stderr_in_a_terminal_and_stdout_in_a_notebook(capsys, monkeypatch):
    monkeypatch.setattr(progress, "tqdm", terminal_tqdm)
    progress.say("reused")
    assert capsys.readouterr() == ("", "reused\n")
    monkeypatch.setattr(progress, "tqdm", notebook_tqdm)
    progress.say("reused")
    assert capsys.readouterr() == ("reused\n", "")
