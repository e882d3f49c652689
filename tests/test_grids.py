"""Tuned arms and their grids (`studies.grids`): where a choice sits, the words that mark an edge, the next grid."""

import pytest

from esreason_lib.paper.studies.grids import edge_note, extended_grid, grid_edge

LRS = (5e-06, 1e-05, 2e-05, 5e-05, 0.0001)


def test_grid_edge_and_its_note():
    assert grid_edge(1e-4, LRS) == "top" and grid_edge(5e-6, LRS) == "bottom" and grid_edge(2e-5, LRS) == ""
    assert grid_edge(0.01, [0.01]) == "only"
    assert edge_note("lr", 1e-4, LRS) == (", the top of its grid [5e-06, 1e-05, 2e-05, 5e-05, 0.0001]: the optimum "
                                          "may lie above")
    assert edge_note("alpha", 0.0012, (0.0048, 0.0012, 0.0024)).endswith("0.0048]: the optimum may lie below")
    assert edge_note("lr", 2e-5, LRS) == "" and edge_note("lr", 0.01, [0.01]) == ", the only lr tried (untuned)"


def test_extended_grid_brackets_the_choice():
    assert extended_grid(1e-4, LRS) == LRS + (2e-4,)
    assert extended_grid(5e-6, LRS) == (2.5e-06,) + LRS
    assert extended_grid(2e-5, LRS) == LRS
    assert extended_grid(0.01, [0.01]) == (0.005, 0.01, 0.02)
    assert grid_edge(1e-4, extended_grid(1e-4, LRS)) == ""  # one extension brings the choice inside


@pytest.mark.parametrize("value,grid,match", [(3e-5, LRS, "not in grid"), (1.0, (), "one or more"),
                                              (0.0, (0.0, 1.0), "step sizes > 0")])
def test_bad_grids_are_refused(value, grid, match):
    with pytest.raises(ValueError, match=match):
        grid_edge(value, grid)
