"""Plot functions: each takes tidy tables, returns `(fig, ax)` and never saves. `save_figure` writes PNG + PDF.

Style (`use_paper_style`, called where plotting starts: a notebook's first cell, `axes_or_new` for a figure it
makes; importing this module changes no matplotlib setting): seaborn's white grid and colorblind palette, one colour
per method and arm kind in every figure (`arm_style`: the method's colour from `METHOD_COLORS` (the base grey, GRPO
blue, ES orange), a darker or lighter shade of it per step size once `register_arms` has seen a method's arms
(`register_shades` for other arms of one kind: bases, populations), a sequence's first stage lighter and dashed), the
noise-injection controls grey and dotted and labelled as controls (`arm_label`), CIs as bands, legends beside the
axes (off the data) or below a multi-panel figure (`figure_legend`), the preset's name in each saved figure's corner
(`save_figure`).

Bar charts, in this style, are in `bar_plots`.
"""

from __future__ import annotations

import colorsys
from pathlib import Path
from typing import Mapping

import matplotlib.colors as mpl_colors
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from esreason_lib.paper.studies.presets import preset_label
from esreason_lib.paths import figures_dir

PALETTE = sns.color_palette("colorblind")
"""seaborn's colorblind palette: every colour of every figure comes from it (or is grey)."""
METHOD_COLORS = {"base": PALETTE[7], "grpo": PALETTE[0], "es": PALETTE[1], "grpo->es": PALETTE[2],
                 "es->grpo": PALETTE[4], "random": PALETTE[5]}


CONTROL_COLOR = "0.72"
"""The noise-injection controls' colour (light grey, lighter than the base's): a control is drawn as one (dotted
lines, hatched bars), never in a method's colour."""
_ARM_COLORS: dict[str, tuple] = {}


def is_control(label: str) -> bool:
    """Whether `label` names a noise-injection control arm ("noise es alpha=0.0012")."""
    return str(label).lower().startswith("noise")


def arm_label(label: str) -> str:
    """How an arm is named in a legend: a control as "noise control (alpha=...)" (mathtext alpha), others as they
    are. "noise es alpha=0.0012" -> "noise control ($\\alpha$=0.0012)"."""
    label = str(label)
    if not is_control(label):
        return label
    setting = [part.replace("alpha", r"$\alpha$") for part in label.split(" ", 2)[2:]]
    return "noise control" + (f" ({setting[0]})" if setting else "")


def _lightness(color, lightness: float) -> tuple:
    """`color` (rgb) with its HLS lightness set to `lightness` (0 black, 1 white)."""
    h, _, s = colorsys.rgb_to_hls(*color[:3])
    return colorsys.hls_to_rgb(h, lightness, s)


def _shades(color, n: int) -> list[tuple]:
    """`n` shades of `color`, darkest first (its own colour when n == 1)."""
    return [tuple(color)] if n == 1 else [_lightness(color, v) for v in np.linspace(0.28, 0.62, n)]


OTHER_COLORS = [PALETTE[i] for i in (6, 8, 3)]
OTHER_COLORS += [_lightness(color, 0.3) for color in OTHER_COLORS] + [(0.0, 0.0, 0.0)]
"""Colours no method, base or control uses, in order, for labels of no known kind (an ablation's variants, a sweep's
sigmas): pink, yellow and vermillion, a dark shade of each, and black (no blue: GRPO's shades are blue), so that blue
and orange mean GRPO and ES in every figure, and nothing else."""


def _setting(label: str) -> float:
    """The number after the last "=" of an arm's label ("es alpha=0.0012" -> 0.0012), inf when there is none."""
    try:
        return float(str(label).rpartition("=")[2])
    except ValueError:
        return float("inf")


def register_arms(arms, aliases: Mapping[str, str] | None = None) -> dict[str, tuple]:
    """Give every arm of `arms` its colour for all later figures (returned as {arm: rgb}): the arms of one method
    ("es alpha=0.0012", "es alpha=0.0024") get shades of the method's colour, darkest for the smallest step size, so
    that they stay apart in every figure; a method with one arm keeps the method's colour. `aliases` {label: arm}
    give a label the colour of the arm it is (notebook 03's "grpo" is notebook 01's "grpo lr=0.0001" run)."""
    by_method: dict[str, list[str]] = {}
    for arm in dict.fromkeys(str(a) for a in arms):
        if not is_control(arm) and " stage " not in arm:
            by_method.setdefault(arm.lower().split(" ")[0], []).append(arm)
    for method, names in by_method.items():
        base = METHOD_COLORS.get(method)
        if base is not None:
            _ARM_COLORS.update(zip(sorted(names, key=_setting), _shades(base, len(names))))
    _ARM_COLORS.update({label: color_for(arm) for label, arm in (aliases or {}).items()})
    return {a: _ARM_COLORS[a] for a in [*map(str, arms), *(aliases or {})] if a in _ARM_COLORS}


def register_shades(labels, kind: str) -> dict[str, tuple]:
    """Give `labels`, several arms of one `kind` (a key of `METHOD_COLORS`: notebook 00's bases are "base", notebook
    06's ES runs at each population N are "es"), shades of that kind's colour for all later figures, darkest first
    in the order given; returns {label: rgb}. ValueError naming an unknown kind."""
    if kind not in METHOD_COLORS:
        raise ValueError(f"register_shades: kind must be one of {sorted(METHOD_COLORS)}, got {kind!r}")
    names = list(dict.fromkeys(map(str, labels)))
    _ARM_COLORS.update(zip(names, _shades(METHOD_COLORS[kind], len(names))))
    return {n: _ARM_COLORS[n] for n in names}


def color_for(label: str, index: int = 0):
    """The arm's colour: grey for a control, the registered shade (`register_arms`), the method's fixed colour, a
    lighter shade of the first method's colour for a sequence's first stage ("grpo->es stage 1"), or the `index`-th
    of `OTHER_COLORS` (never a method's colour) for other labels."""
    label = str(label)
    if is_control(label):
        return mpl_colors.to_rgb(CONTROL_COLOR)
    if " stage " in label:
        first = METHOD_COLORS.get(label.lower().split("->")[0])
        if first is not None:
            return _lightness(first, 0.75)
    if label in _ARM_COLORS:
        return _ARM_COLORS[label]
    return METHOD_COLORS.get(label.lower().split(" ")[0], OTHER_COLORS[index % len(OTHER_COLORS)])


def arm_style(label: str, index: int = 0) -> dict:
    """Line keywords for an arm: its colour (`color_for`), dotted for a control, dashed for a sequence's first stage,
    solid otherwise, and its legend label (`arm_label`)."""
    ls = ":" if is_control(label) else "--" if " stage " in str(label) else "-"
    return {"color": color_for(label, index), "ls": ls, "label": arm_label(label)}


def figure_legend(fig, ncol: int | None = None) -> None:
    """Lay out a multi-panel figure (`tight_layout`) and give it one legend, centred below everything its panels
    draw (rotated tick labels included), from the first panel with labelled artists; the panels' own legends are
    removed (each would cover its data or squeeze the panels)."""
    handles, labels = next(((h, lab) for h, lab in (a.get_legend_handles_labels() for a in fig.axes) if h), ([], []))
    for a in fig.axes:
        if a.get_legend() is not None:
            a.get_legend().remove()
    fig.tight_layout()
    if handles:
        renderer = fig.canvas.get_renderer()
        bottom = min(a.get_tightbbox(renderer).transformed(fig.transFigure.inverted()).y0 for a in fig.axes)
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, min(bottom, 0.0)), frameon=False,
                   ncol=ncol or min(len(labels), 4), fontsize="small")


_STAMP = "preset-stamp"
"""The gid of the preset's name in a saved figure's corner (replaced, not repeated, when a figure is saved again)."""


def save_figure(fig, name: str, *, preset: str, directory: str | Path | None = None) -> list[Path]:
    """Write `fig` as `<directory>/<name>.png` (150 dpi) and `.pdf`, with `preset`'s name in its lower right corner
    (`preset_label`: a smoke run says it is one); returns both paths. `directory` defaults to the preset's own
    folder (`paths.figures_dir(preset)`: figures/ for tiny, figures/<preset>/ otherwise), so a run at one preset
    never overwrites another's figures. No date or software version is written: a redraw of the same figure gives
    the same bytes."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"figure name must be a plain file stem, got {name!r}")
    directory = Path(directory) if directory is not None else figures_dir(preset)
    directory.mkdir(parents=True, exist_ok=True)
    for text in [t for t in fig.texts if t.get_gid() == _STAMP]:
        text.remove()
    fig.text(0.995, 0.005, f"preset: {preset_label(preset)}", ha="right", va="bottom", fontsize=7, color="0.45",
             gid=_STAMP)
    paths = [directory / f"{name}.png", directory / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight", metadata={"Software": None})
    fig.savefig(paths[1], bbox_inches="tight", metadata={"CreationDate": None, "Creator": None, "Producer": None})
    return paths


def use_paper_style() -> None:
    """Seaborn's theme for every figure made after the call: a white grid, the colorblind palette, the notebook
    context (matplotlib's global settings, so a figure made before keeps its own look)."""
    sns.set_theme(style="whitegrid", palette="colorblind", context="notebook")


def axes_or_new(ax, figsize=(5.5, 3.8)):
    """`(figure, ax)` of the given axes, or of a new figure of `figsize` inches in the paper's style
    (`use_paper_style`) when `ax` is None."""
    if ax is None:
        use_paper_style()
        fig, ax = plt.subplots(figsize=figsize)
    return ax.figure, ax


def finish_axes(ax, xlabel: str, ylabel: str, *, logx: bool = False, logy: bool = False, xbase: float = 10,
            ylim: tuple[float, float] | None = None, **legend_kw) -> None:
    """Log scales, axis labels (and `ylim` when given), then a frameless legend beside the axes, off the data, with
    `legend_kw` (none when no artist has a label, e.g. a smoke run whose every point was filtered out)."""
    if logx:
        ax.set_xscale("log", base=xbase)
    if logy:
        ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel, **({"ylim": ylim} if ylim is not None else {}))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**{"frameon": False, "loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": "small",
                     **legend_kw})


def plot_pass_at_k(curves: Mapping[str, pd.DataFrame], ax=None, logx: bool = True):
    """Pass@K curves with bootstrap bands. `curves[label]` has columns k, pass_at_k, ci_low, ci_high."""
    fig, ax = axes_or_new(ax)
    for i, (label, df) in enumerate(curves.items()):
        style = arm_style(label, i)
        ax.plot(df["k"], df["pass_at_k"], marker="o", ms=3, **style)
        if {"ci_low", "ci_high"} <= set(df.columns):
            ax.fill_between(df["k"], df["ci_low"], df["ci_high"], alpha=0.2, color=style["color"], linewidth=0)
    finish_axes(ax, "K", "Pass@K", logx=logx, xbase=2, ylim=(0, 1.02))
    return fig, ax


def plot_metric_curves(runs: Mapping[str, pd.DataFrame], key: str, ax=None, x: str = "step",
                       smooth: int = 1, ylabel: str | None = None):
    """One training metric over steps. `runs[label]` is a metrics table; the seeds of one arm share its label before
    " seed=" ("es alpha=0.0012 seed=1"), and are drawn in the arm's style, named once. `smooth` is a centered
    rolling-mean window."""
    fig, ax = axes_or_new(ax)
    seen = set()
    for i, (label, df) in enumerate(runs.items()):
        if key not in df:
            continue
        y = df[key].rolling(smooth, min_periods=1, center=True).mean() if smooth > 1 else df[key]
        arm = str(label).split(" seed=")[0]
        style = arm_style(arm, i)
        ax.plot(df[x], y, alpha=0.85, lw=1.4, **{**style, "label": style["label"] if arm not in seen else None})
        seen.add(arm)
    finish_axes(ax, x, ylabel or key)
    return fig, ax


def plot_pass_plane(points: pd.DataFrame, x: str = "pass@1", y: str = "pass@K", label: str = "method", ax=None):
    """Pass@1 vs Pass@K scatter; non-dominated points (Pareto front, higher is better) are outlined and joined."""
    fig, ax = axes_or_new(ax, figsize=(5, 4))
    for i, (_, r) in enumerate(points.iterrows()):
        style = arm_style(r[label], i)
        marker = "v" if style["ls"] == ":" else "s" if style["ls"] == "--" else "o"
        ax.scatter(r[x], r[y], s=60, color=style["color"], label=style["label"], zorder=3, marker=marker,
                   edgecolor="black" if bool(r.get("non_dominated", False)) else "none", linewidth=1.5)
    if "non_dominated" in points:
        front = points[points["non_dominated"]].sort_values(x)
        ax.plot(front[x], front[y], ls="--", color="gray", zorder=2)
    finish_axes(ax, x, y, fontsize="small")
    return fig, ax


def plot_xy(table: pd.DataFrame, x: str, y: str, hue: str | None = None, ax=None, logx: bool = False,
            logy: bool = False, marker: str = "o", reference: tuple[np.ndarray, np.ndarray, str] | None = None):
    """Lines of y against x, one per `hue` value; `reference=(xs, ys, label)` adds a dashed reference line."""
    fig, ax = axes_or_new(ax)
    groups = table.groupby(hue, sort=False) if hue else [(y, table)]
    for i, (name, df) in enumerate(groups):
        df = df.sort_values(x)
        ax.plot(df[x], df[y], marker=marker, ms=4, label=str(name), color=color_for(str(name), i))
    if reference is not None:
        ax.plot(reference[0], reference[1], ls="--", color="gray", label=reference[2])
    finish_axes(ax, x, y, logx=logx, logy=logy, fontsize="small")
    return fig, ax


def plot_pass_at_k_seeds(mean: pd.DataFrame, per_seed: pd.DataFrame | None = None, label: str = "method", ax=None,
                         logx: bool = True):
    """Seed-averaged Pass@K per method (thick line, band from `ci_low`/`ci_high`) over thin per-seed lines.

    `mean` has columns `label`, k, pass_at_k, ci_low, ci_high (one row per method and k); `per_seed` (optional)
    has `label`, seed, k, pass_at_k. The legend names each method once, with its seed count when > 1."""
    fig, ax = axes_or_new(ax)
    for i, (name, df) in enumerate(mean.groupby(label, sort=False)):
        style = arm_style(name, i)
        c = style["color"]
        seeds = per_seed[per_seed[label] == name] if per_seed is not None else None
        n_seeds = seeds["seed"].nunique() if seeds is not None else 1
        if seeds is not None and n_seeds > 1:
            for _, s in seeds.groupby("seed"):
                s = s.sort_values("k")
                ax.plot(s["k"], s["pass_at_k"], color=c, lw=0.8, alpha=0.4)
        df = df.sort_values("k")
        ax.plot(df["k"], df["pass_at_k"], marker="o", ms=3, lw=2, color=c, ls=style["ls"],
                label=f"{style['label']} ({n_seeds} seeds)" if n_seeds > 1 else style["label"])
        ax.fill_between(df["k"], df["ci_low"], df["ci_high"], alpha=0.2, color=c, linewidth=0)
    finish_axes(ax, "K", "Pass@K", logx=logx, xbase=2, ylim=(0, 1.02))
    return fig, ax


def plot_scatter(table: pd.DataFrame, x: str, y: str, hue: str | None = None, ax=None, logx: bool = False,
                 logy: bool = False, diagonal: bool = True):
    """Scatter of y against x, one color per `hue` value; `diagonal` adds the dashed line y = x over the data."""
    fig, ax = axes_or_new(ax)
    groups = table.groupby(hue, sort=True) if hue else [(y, table)]
    for i, (name, df) in enumerate(groups):
        ax.scatter(df[x], df[y], s=14, alpha=0.7, label=f"{hue}={name}" if hue else str(name),
                   color=color_for(str(name), i))
    if diagonal and len(table):
        vals = pd.concat([table[x], table[y]])
        vals = vals[vals > 0] if (logx or logy) else vals
        if len(vals):
            lo, hi = float(vals.min()), float(vals.max())
            ax.plot([lo, hi], [lo, hi], ls="--", color="gray", label="y = x")
    finish_axes(ax, x, y, logx=logx, logy=logy, fontsize="small")
    return fig, ax


def plot_frontier_paths(paths: pd.DataFrame, x: str = "pass@1", y: str = "pass@K", label: str = "arm", ax=None):
    """Each arm's training path on the Pass@1-Pass@K plane: one line per `label` through its points in `step`
    order (seed means; the base is step 0 of every path), the final point marked larger. An arm whose snapshots
    were not evaluated (only its final model: `ComparisonSpec.path_methods`) is drawn as that point alone, with no
    line that would suggest a path.

    `paths` has columns `label`, step, `x`, `y` (one row per arm and step, e.g. `frontier_points`)."""
    fig, ax = axes_or_new(ax, figsize=(6, 4.5))
    base = paths[paths[label] == "base"]
    for i, (name, df) in enumerate(paths[paths[label] != "base"].groupby(label, sort=False)):
        style = arm_style(name, i)
        if len(df) > 1:
            df = pd.concat([base, df]).sort_values("step")
            ax.plot(df[x], df[y], marker="o", ms=3, lw=1.5, **style)
        ax.scatter(df[x].iloc[-1:], df[y].iloc[-1:], s=60, color=style["color"], edgecolor="black", zorder=3,
                   label=None if len(df) > 1 else style.get("label"))
    if not base.empty:
        ax.scatter(base[x], base[y], s=60, color=color_for("base"), label="base", zorder=4)
    finish_axes(ax, x, y, fontsize="small")
    return fig, ax

