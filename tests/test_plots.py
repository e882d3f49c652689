import matplotlib
import numpy as np

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from esreason_lib import paths  # noqa: E402
from esreason_lib.paper import bar_plots, plots  # noqa: E402


def _curve(shift):
    return pd.DataFrame({"k": [1, 2, 4], "pass_at_k": [0.2 + shift, 0.4 + shift, 0.6 + shift],
                         "ci_low": [0.1, 0.3, 0.5], "ci_high": [0.3, 0.5, 0.7]})


def test_save_figure_writes_png_and_pdf(tmp_path):
    fig, ax = plots.plot_pass_at_k({"base": _curve(0), "es": _curve(0.1)})
    paths = plots.save_figure(fig, "demo", preset="tiny", directory=tmp_path)
    assert [p.suffix for p in paths] == [".png", ".pdf"]
    assert all(p.stat().st_size > 0 for p in paths)
    again = plots.save_figure(fig, "demo2", preset="tiny", directory=tmp_path)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in paths]  # no dates: same bytes
    assert b"Matplotlib version" not in paths[0].read_bytes()  # nor the version: a new matplotlib, same PNG
    with pytest.raises(ValueError, match="figure name"):
        plots.save_figure(fig, "../escape", preset="tiny", directory=tmp_path)


def test_save_figure_names_the_preset_in_the_corner_and_keys_its_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("ESREASON_FIGURES", str(tmp_path))
    fig, ax = plots.plot_pass_at_k({"base": _curve(0)})
    assert plots.save_figure(fig, "demo", preset="tiny")[0] == tmp_path / "demo.png"
    assert [t.get_text() for t in fig.texts] == ["preset: tiny"]
    assert plots.save_figure(fig, "demo", preset="smoke")[0] == tmp_path / "smoke" / "demo.png"
    assert [t.get_text() for t in fig.texts] == ["preset: smoke (smoke test: numbers mean nothing)"]  # replaced


def test_plot_functions_return_fig_ax_and_draw_data():
    fig, ax = plots.plot_pass_at_k({"base": _curve(0), "grpo": _curve(0.05)})
    assert len(ax.lines) == 2 and ax.get_ylabel() == "Pass@K"
    metrics = {"es seed=0": pd.DataFrame({"step": [0, 1, 2], "policy/entropy": [1.0, 0.9, 0.8]}),
               "es seed=1": pd.DataFrame({"step": [0, 1, 2], "policy/entropy": [1.0, 0.95, 0.9]}),
               "grpo seed=0": pd.DataFrame({"step": [0, 1, 2], "reward/mean": [0.1, 0.2, 0.3]})}
    fig, ax = plots.plot_metric_curves(metrics, "policy/entropy", smooth=2)
    assert len(ax.lines) == 2  # grpo has no entropy column here
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["es"]
    points = pd.DataFrame({"method": ["base", "es", "grpo"], "pass@1": [0.2, 0.3, 0.35],
                           "pass@K": [0.8, 0.9, 0.7], "non_dominated": [False, True, True]})
    fig, ax = plots.plot_pass_plane(points)
    assert len(ax.collections) == 3
    fig, ax = bar_plots.plot_bars(pd.DataFrame({"m": ["a", "b"], "v": [1.0, 2.0], "e": [0.1, 0.1]}), "m", "v", yerr="e")
    assert len(ax.patches) >= 2
    fig, ax = plots.plot_xy(pd.DataFrame({"x": [1, 2, 3] * 2, "y": [1, 4, 9, 2, 3, 4], "h": ["a"] * 3 + ["b"] * 3}),
                            "x", "y", hue="h", logx=True, reference=([1, 3], [1, 9], "ref"))
    assert len(ax.lines) == 3 and ax.get_xscale() == "log"


def test_color_for_is_stable_per_method():
    assert plots.color_for("es seed=3") == plots.color_for("ES")
    assert plots.color_for("grpo") != plots.color_for("es")


def test_plot_pass_at_k_seeds_and_bars_spread():
    mean = pd.concat([_curve(0).assign(method="base"), _curve(0.1).assign(method="es")], ignore_index=True)
    per_seed = pd.concat([_curve(0).assign(method="base", seed=-1), _curve(0.05).assign(method="es", seed=0),
                          _curve(0.15).assign(method="es", seed=1)], ignore_index=True)
    fig, ax = plots.plot_pass_at_k_seeds(mean, per_seed)
    assert len(ax.lines) == 2 + 2  # two thick means, two thin es seeds (a single-seed base draws no thin line)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["base", "es (2 seeds)"]
    table = pd.DataFrame({"method": ["base", "es"], "v": [1.0, 2.0], "v_min": [1.0, 1.5], "v_max": [1.0, 2.5]})
    fig, ax = bar_plots.plot_bars_spread(table, "method", "v")
    assert len(ax.patches) == 2 and [t.get_text() for t in ax.get_xticklabels()] == ["base", "es"]
    mean = float(np.mean([0.1] * 3))  # 0.10000000000000002: the mean of equal seeds one ulp above their max
    ulp = pd.DataFrame({"method": ["es"], "v": [mean], "v_min": [0.1], "v_max": [0.1]})
    fig, ax = bar_plots.plot_bars_spread(ulp, "method", "v")  # matplotlib rejects a negative whisker
    assert len(ax.patches) == 1


def test_plot_grouped_bars_averages_pairs_and_uses_method_colors():
    table = pd.DataFrame({"module": ["mlp", "mlp", "norm", "mlp", "norm"], "method": ["es", "es", "es", "grpo", "grpo"],
                          "v": [1.0, 3.0, 0.5, 4.0, 0.2], "e": [0.1, 0.3, 0.0, 0.1, 0.1]})
    fig, ax = bar_plots.plot_grouped_bars(table, "module", "v", hue="method", yerr="e")
    heights = sorted(p.get_height() for p in ax.patches)
    assert heights == pytest.approx([0.2, 0.5, 2.0, 4.0])  # es/mlp is the mean of its two rows
    es_bar = next(p for p in ax.patches if p.get_height() == pytest.approx(2.0))
    assert es_bar.get_facecolor()[:3] == pytest.approx(tuple(plots.color_for("es")))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["mlp", "norm"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["es", "grpo"]


def test_plot_scatter_groups_by_hue_and_draws_the_diagonal():
    table = pd.DataFrame({"x": [1e-3, 1e-2, 2e-3, 3e-2], "y": [5e-4, 8e-3, 1e-3, 2e-2], "s": [1, 1, 2, 2]})
    fig, ax = plots.plot_scatter(table, "x", "y", hue="s", logx=True, logy=True)
    assert len(ax.collections) == 2 and len(ax.lines) == 1  # two groups, one y = x line
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    fig, ax = plots.plot_scatter(table.iloc[:0], "x", "y")  # empty: no diagonal, no error
    assert not ax.lines


def test_figures_dir_default_and_env(tmp_path, monkeypatch):
    monkeypatch.delenv("ESREASON_FIGURES", raising=False)
    assert paths.figures_dir() == paths.REPO_ROOT / "figures"
    monkeypatch.setenv("ESREASON_FIGURES", str(tmp_path))
    assert paths.figures_dir() == tmp_path


def test_scatter_of_no_points_draws_no_legend_and_warns_nothing(recwarn):
    empty = pd.DataFrame({"x": [], "y": [], "sigma": []})
    fig, ax = plots.plot_scatter(empty, "x", "y", hue="sigma")
    assert ax.get_legend() is None and not [str(w.message) for w in recwarn]
    fig, ax = plots.plot_scatter(pd.DataFrame({"x": [1.0], "y": [2.0], "sigma": [0.1]}), "x", "y", hue="sigma")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["sigma=0.1", "y = x"]


def test_plot_frontier_paths_returns_fig_ax():
    import pandas as pd

    from esreason_lib.paper.plots import plot_frontier_paths

    pts = pd.DataFrame({"arm": ["base", "es a", "es a", "grpo b", "noise es a"], "step": [0, 1, 2, 2, 2],
                        "pass@1": [0.1, 0.15, 0.2, 0.3, 0.1], "pass@K": [0.5, 0.55, 0.6, 0.5, 0.5]})
    fig, ax = plot_frontier_paths(pts)
    # a line only through the arm with snapshots; arms with their final model alone are a point, not a path
    assert [line.get_label() for line in ax.lines] == ["es a"] and ax.get_xlabel() == "pass@1"
    points = {c.get_label() for c in ax.collections}
    assert {"grpo b", "base"} <= points and "es a" not in points


def test_arm_styles_one_colour_per_arm_controls_grey_and_dotted_stages_apart():
    plots.register_arms(["base", "grpo lr=0.0001", "grpo lr=2e-05", "es alpha=0.0024", "es alpha=0.0012",
                         "noise es alpha=0.0012"])
    grpo = [plots.color_for("grpo lr=2e-05"), plots.color_for("grpo lr=0.0001")]
    assert grpo[0] != grpo[1] and plots.color_for("es alpha=0.0012") != plots.color_for("es alpha=0.0024")
    assert sum(grpo[0]) < sum(grpo[1])  # the smaller step size is the darker shade, in every figure
    control = plots.arm_style("noise es alpha=0.0012")
    assert control == {"color": plots.mpl_colors.to_rgb(plots.CONTROL_COLOR), "ls": ":",
                       "label": r"noise control ($\alpha$=0.0012)"}
    stage = plots.arm_style("grpo->es stage 1")
    assert stage["ls"] == "--" and stage["color"] != plots.color_for("grpo->es") != plots.color_for("grpo")
    assert plots.arm_style("grpo->es")["ls"] == "-" and plots.color_for("es") == plots.METHOD_COLORS["es"]


def test_an_alias_takes_the_shade_of_the_arm_it_is(monkeypatch):
    """Notebook 03's "grpo" (GRPO-only at the preset's lr) is notebook 01's "grpo lr=0.0001": the same light blue in
    both figures, not the method's own blue; the sequence arms keep their colours."""
    monkeypatch.setattr(plots, "_ARM_COLORS", {})
    assert plots.color_for("grpo") == plots.METHOD_COLORS["grpo"]  # nothing registered: the method's colour
    arms = ["grpo lr=2e-05", "grpo lr=0.0001", "es alpha=0.0012", "es alpha=0.0024"]
    colours = plots.register_arms(arms, aliases={"grpo": "grpo lr=0.0001", "es": "es alpha=0.0024"})
    assert colours["grpo"] == plots.color_for("grpo lr=0.0001") != plots.METHOD_COLORS["grpo"]
    assert colours["es"] == plots.color_for("es alpha=0.0024") != plots.color_for("es alpha=0.0012")
    fig, ax = plots.plot_pass_at_k({"grpo": _curve(0), "grpo->es": _curve(0.1)})
    assert [line.get_color() for line in ax.lines] == [colours["grpo"], plots.METHOD_COLORS["grpo->es"]]


def test_frontier_paths_draws_arms_apart_and_legends_sit_off_the_axes():
    pts = pd.DataFrame({"arm": ["base", "es alpha=1", "es alpha=2", "noise es alpha=1"], "step": [0, 2, 2, 2],
                        "pass@1": [0.1, 0.2, 0.3, 0.1], "pass@K": [0.5, 0.6, 0.55, 0.45]})
    plots.register_arms(pts["arm"])
    fig, ax = plots.plot_frontier_paths(pts)
    colors = {c.get_label(): tuple(c.get_facecolor()[0][:3]) for c in ax.collections}
    assert colors["es alpha=1"] != colors["es alpha=2"]
    assert colors["noise control ($\\alpha$=1)"] == plots.mpl_colors.to_rgb(plots.CONTROL_COLOR)
    assert ax.get_legend().get_bbox_to_anchor().x0 > ax.get_window_extent().x1 - 1  # beside the axes, not on them


def test_figure_legend_puts_one_legend_under_a_multi_panel_figure():
    fig, axes = plots.plt.subplots(1, 2)
    for ax in axes:
        plots.plot_pass_at_k({"base": _curve(0), "es": _curve(0.1)}, ax=ax)
    plots.figure_legend(fig)
    assert all(ax.get_legend() is None for ax in axes) and len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["base", "es"]



def test_importing_plots_changes_no_style_until_plotting_starts():
    """In a fresh interpreter: the import leaves matplotlib's settings as they were; `use_paper_style` (and a figure
    `axes_or_new` makes) sets seaborn's white grid."""
    import subprocess
    import sys

    code = ("import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt\n"
            "before = dict(plt.rcParams)\n"
            "from esreason_lib.paper import plots\n"
            "print(dict(plt.rcParams) == before, plt.rcParams['axes.grid'])\n"
            "plots.axes_or_new(None)\n"
            "print(plt.rcParams['axes.grid'], plt.rcParams['axes.facecolor'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=paths.REPO_ROOT).stdout.split()
    assert out == ["True", "False", "True", "white"]


def test_method_colours_mean_one_thing_in_every_figure():
    """Blue and orange are GRPO and ES only: labels of no known kind take `OTHER_COLORS`, and several arms of one
    kind (bases, ES at each population) take shades of that kind's colour."""
    method_colours = set(plots.METHOD_COLORS.values())
    assert all(plots.color_for(f"variant {i}", i) not in method_colours for i in range(8))
    assert plots.color_for("rank alpha=0.01", 0) == plots.OTHER_COLORS[0]
    assert len(set(plots.OTHER_COLORS)) == len(plots.OTHER_COLORS) == 7  # five sigmas of notebook 02 stay apart
    bases = plots.register_shades(["qwen2-s-habit", "qwen2-s"], "base")
    assert list(bases) == ["qwen2-s-habit", "qwen2-s"] and bases["qwen2-s-habit"] != bases["qwen2-s"]
    assert plots.color_for("qwen2-s") == bases["qwen2-s"]
    hue = plots.colorsys.rgb_to_hls(*plots.METHOD_COLORS["es"])[0]
    shades = plots.register_shades(["N=2", "N=4", "N=8"], "es").values()
    assert all(abs(plots.colorsys.rgb_to_hls(*c)[0] - hue) < 1e-9 for c in shades)  # ES's hue, three lightnesses
    with pytest.raises(ValueError, match="register_shades: kind must be one of .*, got 'population'"):
        plots.register_shades(["N=2"], "population")
