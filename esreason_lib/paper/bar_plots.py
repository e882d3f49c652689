"""Bar charts in the paper's style (`plots`): each takes a tidy table, returns `(fig, ax)` and never saves.

One bar per row with whiskers for a spread (`plot_bars_spread`, a control's bar hatched), bars side by side per group
(`plot_grouped_bars`), and seaborn's grouped bars (`plot_bars`), each arm in its colour (`plots.color_for`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns

from esreason_lib.paper.plots import arm_label, axes_or_new, color_for, finish_axes, is_control


def plot_bars(table: pd.DataFrame, x: str, y: str, hue: str | None = None, ax=None, yerr: str | None = None):
    """Grouped bar chart of a tidy table (optionally with an error column)."""
    fig, ax = axes_or_new(ax)
    sns.barplot(data=table, x=x, y=y, hue=hue, ax=ax, errorbar=None)
    if yerr is not None and hue is None:
        ax.errorbar(np.arange(len(table)), table[y], yerr=table[yerr], fmt="none", color="black", capsize=3)
    ax.tick_params(axis="x", rotation=20)
    return fig, ax


def plot_bars_spread(table: pd.DataFrame, x: str, y: str, low: str | None = None, high: str | None = None, ax=None):
    """Bars of `y` per `x` (one row each, in table order, method colors) with asymmetric whiskers from the
    `low`/`high` columns (default `<y>_min` / `<y>_max`, e.g. the spread over seeds)."""
    fig, ax = axes_or_new(ax)
    low, high = low or f"{y}_min", high or f"{y}_max"
    pos = np.arange(len(table))
    bars = ax.bar(pos, table[y], color=[color_for(v, i) for i, v in enumerate(table[x])], width=0.7)
    for bar, v in zip(bars, table[x]):
        bar.set_hatch("//" if is_control(v) else None)
    # the mean of equal seeds can exceed their max by an ulp: whiskers are clipped at 0
    yerr = np.clip([table[y] - table[low], table[high] - table[y]], 0, None)  # [2, rows]
    ax.errorbar(pos, table[y], yerr=yerr, fmt="none", color="black", capsize=3)
    ax.set_xticks(pos, [arm_label(v) for v in table[x]])
    ax.set(xlabel=x, ylabel=y)
    return fig, ax


def plot_grouped_bars(table: pd.DataFrame, x: str, y: str, hue: str, ax=None, yerr: str | None = None):
    """Bars of `y` per `x` value, one bar per `hue` value side by side in the method colors; rows sharing an
    (x, hue) pair are averaged; `yerr` names a column of symmetric whiskers (its mean per pair)."""
    fig, ax = axes_or_new(ax)
    cols = [y] + ([yerr] if yerr else [])
    means = table.groupby([x, hue], sort=False)[cols].mean()
    xs, hues = list(dict.fromkeys(table[x])), list(dict.fromkeys(table[hue]))
    width = 0.8 / len(hues)
    for j, h in enumerate(hues):
        rows = [(i, means.loc[(v, h)]) for i, v in enumerate(xs) if (v, h) in means.index]
        pos = np.array([i for i, _ in rows]) - 0.4 + width * (j + 0.5)
        ax.bar(pos, [r[y] for _, r in rows], width=width, color=color_for(str(h), j), label=str(h))
        if yerr:
            ax.errorbar(pos, [r[y] for _, r in rows], yerr=[r[yerr] for _, r in rows], fmt="none", color="black",
                        capsize=3)
    ax.set_xticks(np.arange(len(xs)), [str(v) for v in xs])
    finish_axes(ax, x, y, fontsize="small", title=hue)
    return fig, ax
