"""The arrival curves as a picture: unallocated GPUs versus arrived load, per policy.

matplotlib is a development dependency (the binder never needs it), imported here only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import cast

JSON = dict[str, object]


def plot_curves(results: JSON | Sequence[JSON], path: Path) -> None:
    """One panel per replay result (a trace), one line per policy, bound as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [results] if isinstance(results, Mapping) else list(results)
    fig, axes = plt.subplots(2, len(runs), figsize=(6.4 * len(runs), 9.0), squeeze=False)
    for column, result in enumerate(runs):
        table = cast(dict[str, dict[str, object]], result["policies"])
        bound = result.get("bound_unallocated_gpu_pct")
        for row, (xlim, ylim) in enumerate((((0, 130), (0, 100)), ((90, 130), (0, 12)))):
            ax = axes[row][column]
            for name, figures in table.items():
                curve = cast(list[list[float]], figures.get("curve") or [])
                binder = name == "binder"
                ax.plot(
                    [x for x, _ in curve],
                    [y for _, y in curve],
                    label=name,
                    linewidth=2.4 if binder else 1.2,
                    zorder=3 if binder else 2,
                )
            if isinstance(bound, float):
                ax.axhline(bound, color="grey", linestyle="--", linewidth=1, label="bound")
            ax.axvline(100, color="grey", linestyle=":", linewidth=1)
            ax.set_xlim(*xlim)
            ax.set_ylim(*ylim)
            ax.grid(True, alpha=0.3)
            ax.set_xlabel("arrived GPU requests, % of capacity")
            ax.set_ylabel("unallocated GPUs, % of capacity")
            zoom = " (near full)" if row else ""
            ax.set_title(f"{result['trace']}, {result['seeds']} seeds{zoom}")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
