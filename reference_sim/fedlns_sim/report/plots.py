"""SVG plots of a report, from run summaries (:func:`.load.load_runs`): one legend per figure, references drawn as
lines, error bars only where there are several seeds, and an axis that does not start at zero says so.

SVG because it is text, written the same way every time (no date, fixed element ids): a figure rebuilt after a
sweep that adds a few runs differs from the one before only in what changed, so git stores kilobytes per rebuild
where a PNG of the same figure (0.1-0.5 MB) was stored whole each time."""

from __future__ import annotations

import io
import math
import textwrap
from pathlib import Path

import numpy as np

from ..config import ATTACK_NAMES, FAMILIES, METHOD_NAMES, METHODS, PARTITION_NAMES, PARTITIONS
from ..runfiles import atomic_write
from .compare import main_runs, sweep_seeds
from .load import family_label
from .stats import detection_rates, mean_std

REFERENCE_STYLE = {
    "clean": dict(color="black", linestyle="--", label="Clean (FedAvg, 0%)"),
    "oracle": dict(color="tab:green", linestyle=":", label="Oracle (benign only)"),
    "unigram": dict(color="tab:gray", linestyle="-.", label="Unigram model"),
}
NOT_FROM_ZERO = " (axis does not start at 0)"


def plot_all(summaries: list[dict], recovered: list[dict], out: Path, matrix: list[dict] | None = None) -> list[Path]:
    """perplexity_vs_fraction.svg, perplexity_per_round.svg, detection_rates.svg, recovery.svg and, with several
    attacks, attack_matrix.svg."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    main = [s for s in main_runs(summaries) if s["method"] != "fedlns_two"]
    panels = sorted(
        {(s["family"], s["partition"]) for s in main}, key=lambda p: (PARTITIONS.index(p[1]), FAMILIES.index(p[0]))
    )
    if not panels:
        return []
    colors = {m: plt.get_cmap("tab10")(i) for i, m in enumerate(METHODS)}
    families = [f for f in FAMILIES if any(p[0] == f for p in panels)]
    partitions = [p for p in PARTITIONS if any(q[1] == p for q in panels)]

    def grid():
        # rows = partitions, columns = families, as in the paper's figures; one axis per panel, in panel order
        figure, axes = plt.subplots(
            len(partitions), len(families), figsize=(4.6 * len(families), 3.9 * len(partitions) + 0.6), squeeze=False
        )
        used = [axes[partitions.index(p)][families.index(f)] for f, p in panels]
        for row in axes:
            for axis in row:
                if not any(axis is u for u in used):
                    axis.set_visible(False)
        return figure, used

    def finish(figure, axes, path):
        width = figure.get_size_inches()[0]
        for axis in axes:  # long titles (the fine-tuning scenario's) wrap to the panel's width
            axis.set_title(textwrap.fill(axis.get_title(), width=int(11 * width / len(families))), fontsize=9)
        handles, labels = {}, []
        for axis in axes:  # one legend for the figure: every label once
            for handle, label in zip(*axis.get_legend_handles_labels()):
                if label not in handles:
                    handles[label] = handle
                    labels.append(label)
        columns = max(2, min(len(labels), 5, int(width / 1.9)))  # as many legend columns as the width holds
        rows = -(-len(labels) // columns)
        figure.legend(
            [handles[label] for label in labels], labels, loc="lower center", ncol=columns, fontsize=8, frameon=False
        )
        height = figure.get_size_inches()[1]  # leave the legend's rows (about 0.2 inch each) below the panels
        figure.tight_layout(rect=(0, min(0.4, (0.2 * rows + 0.25) / height), 1, 1))
        save(figure, path)
        plt.close(figure)
        return path

    def references(axis, runs, fraction, horizontal=True):
        """Clean, oracle (at ``fraction``) and unigram as horizontal lines; returns their values."""
        values = {
            "clean": [s["perplexity"] for s in runs if s["method"] == "fedavg" and s["fraction"] == 0.0],
            "oracle": [s["perplexity"] for s in runs if s["method"] == "oracle" and s["fraction"] == fraction],
            "unigram": [s["unigram_perplexity"] for s in runs if s["unigram_perplexity"] is not None],
        }
        drawn = {}
        for name, found in values.items():
            if found and horizontal:
                drawn[name] = float(np.mean(found))
                axis.axhline(drawn[name], linewidth=1.1, **REFERENCE_STYLE[name])
        return drawn

    paths = []
    # 1. perplexity vs malicious fraction (bars when one fraction was run), with the references
    figure, axes = grid()
    for axis, (family, partition) in zip(axes, panels):
        runs = [s for s in main if s["family"] == family and s["partition"] == partition]
        attacked = sorted({s["fraction"] for s in runs if s["fraction"] > 0}) or [0.0]
        methods = [
            m for m in METHODS if m != "oracle" and any(s["method"] == m and s["fraction"] in attacked for s in runs)
        ]
        if len(attacked) == 1:
            drawn = references(axis, runs, attacked[0])
            values = list(drawn.values())
            for i, method in enumerate(methods):
                found = [s["perplexity"] for s in runs if s["method"] == method and s["fraction"] == attacked[0]]
                mean, std = mean_std(found)
                axis.bar(
                    i,
                    mean,
                    color=colors[method],
                    label=METHOD_NAMES[method],
                    yerr=std if len(found) > 1 else None,
                    capsize=3,
                )
                values += [mean - (std if len(found) > 1 else 0)]
            axis.set_xticks(range(len(methods)), [METHOD_NAMES[m] for m in methods], rotation=60, fontsize=7)
            low = 0.9 * min(values)
            axis.set_ylim(bottom=low)
            seeds = len({s["seed"] for s in runs})
            axis.set_title(
                f"{family_label(family, runs)}, {PARTITION_NAMES[partition]}, "
                f"{attacked[0] * 100:g}% malicious ({seeds} seed{'s' * (seeds > 1)})",
                fontsize=9,
            )
            axis.set_ylabel("perplexity, best checkpoint" + (NOT_FROM_ZERO if low > 0 else ""), fontsize=8)
        else:
            # the sweep's seeds (those run at every fraction) and its methods (those run at several fractions)
            swept_seeds = sweep_seeds(runs)
            runs = [s for s in runs if s["seed"] in swept_seeds]
            fractions = sorted({s["fraction"] for s in runs})
            swept = [m for m in methods if len({s["fraction"] for s in runs if s["method"] == m}) > 1]
            lows = []
            for method in swept + (["oracle"] if any(s["method"] == "oracle" for s in runs) else []):
                points = [
                    (f, [s["perplexity"] for s in runs if s["method"] == method and s["fraction"] == f])
                    for f in fractions
                ]
                points = [(f, found) for f, found in points if found]
                means = [mean_std(found)[0] for _, found in points]
                errors = [mean_std(found)[1] if len(found) > 1 else 0.0 for _, found in points]
                style = (
                    {"color": REFERENCE_STYLE["oracle"]["color"], "linestyle": ":"}
                    if method == "oracle"
                    else {"color": colors[method]}
                )
                axis.errorbar(
                    [100 * f for f, _ in points],
                    means,
                    yerr=errors,
                    marker="o",
                    capsize=3,
                    label=METHOD_NAMES[method],
                    **style,
                )
                lows += means
            unigram = [s["unigram_perplexity"] for s in runs if s["unigram_perplexity"] is not None]
            if unigram:
                axis.axhline(np.mean(unigram), linewidth=1.1, **REFERENCE_STYLE["unigram"])
            axis.set_xlabel("malicious clients (%)")
            axis.set_title(
                f"{family_label(family, runs)}, {PARTITION_NAMES[partition]} "
                f"({len(swept_seeds)} seed{'s' * (len(swept_seeds) > 1)})",
                fontsize=9,
            )
            axis.set_ylabel("perplexity, best checkpoint" + NOT_FROM_ZERO, fontsize=8)
    paths.append(finish(figure, axes, out / "perplexity_vs_fraction.svg"))

    # 2. per-round curves at the largest fraction (mean over seeds), the clean run beside them
    figure, axes = grid()
    for axis, (family, partition) in zip(axes, panels):
        runs = [s for s in main if s["family"] == family and s["partition"] == partition]
        top = max(s["fraction"] for s in runs)
        shown = [(m, top) for m in METHODS if any(s["method"] == m and s["fraction"] == top for s in runs)]
        if top > 0 and any(s["method"] == "fedavg" and s["fraction"] == 0.0 for s in runs):
            shown.append(("clean", 0.0))
        for method, fraction in shown:
            source = "fedavg" if method == "clean" else method
            curves = [dict(s["curve"]) for s in runs if s["method"] == source and s["fraction"] == fraction]
            rounds = sorted(set.intersection(*(set(c) for c in curves)))
            curve_style = (
                REFERENCE_STYLE[method]
                if method in REFERENCE_STYLE
                else {"color": colors[method], "label": METHOD_NAMES[method]}
            )
            axis.plot(rounds, [np.mean([c[r] for c in curves]) for r in rounds], linewidth=1.2, **curve_style)
        axis.set_yscale("log")
        axis.set_xlabel("round")
        axis.set_ylabel("evaluation perplexity (log scale)", fontsize=8)
        seeds = len({s["seed"] for s in runs})
        axis.set_title(
            f"{family_label(family, runs)}, {PARTITION_NAMES[partition]}, {top * 100:g}% malicious, "
            f"mean of {seeds} seed{'s' * (seeds > 1)}",
            fontsize=9,
        )
    paths.append(finish(figure, axes, out / "perplexity_per_round.svg"))

    # 3. detection rates of the methods that pick clients
    figure, axes = grid()
    for axis, (family, partition) in zip(axes, panels):
        runs = [
            s
            for s in main
            if s["family"] == family
            and s["partition"] == partition
            and s["selects_clients"]
            and s["method"] != "oracle"
            and s["fraction"] > 0
        ]
        methods = [m for m in METHODS if any(s["method"] == m for s in runs)]
        for i, method in enumerate(methods):
            rates = detection_rates(
                **{k: sum(s[k] for s in runs if s["method"] == method) for k in ("tp", "fp", "fn", "tn")}
            )
            axis.bar(i - 0.2, rates["tpr"], width=0.4, color="tab:green", label="TPR (attackers rejected)")
            axis.bar(i + 0.2, rates["fpr"], width=0.4, color="tab:red", label="FPR (benign rejected)")
        axis.set_xticks(range(len(methods)), [METHOD_NAMES[m] for m in methods], fontsize=8)
        axis.set_ylim(0, 1)
        axis.set_title(f"{family_label(family, runs)}, {PARTITION_NAMES[partition]}", fontsize=9)
        axis.set_ylabel("rate over decided rounds", fontsize=8)
    paths.append(finish(figure, axes, out / "detection_rates.svg"))

    # 4. recovery of each defence at the largest fraction, with its interval over seeds
    rows = [r for r in recovered if (r["family"], r["partition"]) in panels]
    if rows:
        figure, axes = grid()
        for axis, (family, partition) in zip(axes, panels):
            here = [r for r in rows if r["family"] == family and r["partition"] == partition]
            if not here:
                continue
            top = max(r["fraction"] for r in here)
            here = [r for r in here if r["fraction"] == top]
            for i, r in enumerate(here):
                best = r["best"]
                error = None
                if math.isfinite(best["low"]):
                    error = [[best["mean"] - best["low"]], [best["high"] - best["mean"]]]
                axis.bar(
                    i, best["mean"], color=colors[r["method"]], yerr=error, capsize=3, label=METHOD_NAMES[r["method"]]
                )
            axis.axhline(1.0, **REFERENCE_STYLE["oracle"])
            axis.axhline(0.0, color="black", linewidth=0.8)
            axis.set_xticks(range(len(here)), [METHOD_NAMES[r["method"]] for r in here], rotation=60, fontsize=7)
            seeds = max(len(r["seeds"]) for r in here)
            axis.set_title(
                f"{FAMILY_NAMES_SHORT.get(family, family)}, {PARTITION_NAMES[partition]}, "
                f"{top * 100:g}% malicious ({seeds} seed{'s' * (seeds > 1)})",
                fontsize=9,
            )
            axis.set_ylabel("recovery (FedAvg - m) / (FedAvg - oracle)", fontsize=8)
        paths.append(finish(figure, axes, out / "recovery.svg"))
    if matrix:
        paths.append(plot_attack_matrix(matrix, out / "attack_matrix.svg"))
    return paths


def plot_attack_matrix(cells: list[dict], path: Path) -> Path:
    """Heat maps of the best-checkpoint perplexity above the oracle's (per seed, relative, mean over seeds): rows
    = methods with FedAvg first, columns = attacks, one panel per (family, partition, fraction); 0% = as good as
    averaging the benign clients only. Defined for every cell, unlike the recovery, which needs the attack to
    have harmed FedAvg; the backdoor's cells also carry its success rate, which perplexity does not show."""
    import matplotlib.pyplot as plt

    panels = sorted(
        {(c["family"], c["partition"], c["fraction"]) for c in cells},
        key=lambda p: (FAMILIES.index(p[0]), PARTITIONS.index(p[1]), p[2]),
    )
    attacks = [a for a in ATTACK_NAMES if any(c["attack"] == a for c in cells)]
    methods = [m for m in METHODS if any(c["method"] == m for c in cells)]
    top = 50.0  # percent; the colour scale saturates there
    figure, axes = plt.subplots(
        1, len(panels), figsize=(1.0 + 0.8 * len(attacks) * len(panels), 1.6 + 0.42 * len(methods)), squeeze=False
    )
    for axis, (family, partition, fraction) in zip(axes[0], panels):
        grid = np.full((len(methods), len(attacks)), np.nan)
        labels = {}
        for c in cells:
            if (c["family"], c["partition"], c["fraction"]) != (family, partition, fraction) or c[
                "above_oracle"
            ] is None:
                continue
            i, j = methods.index(c["method"]), attacks.index(c["attack"])
            grid[i, j] = 100 * c["above_oracle"]["mean"]
            labels[i, j] = f"{grid[i, j]:+.0f}%"
            if c["attack"] == "backdoor" and math.isfinite(c["backdoor_asr"][0]):
                labels[i, j] += f"\nASR {c['backdoor_asr'][0]:.2f}"
        image = axis.imshow(np.clip(grid, 0, top), cmap="RdYlGn_r", vmin=0, vmax=top, aspect="auto")
        for (i, j), text in labels.items():
            axis.text(j, i, text, ha="center", va="center", fontsize=6)
        axis.set_xticks(range(len(attacks)), attacks, rotation=60, fontsize=7, ha="right")
        # The rows are the same in every panel: name them once, on the left, where they cannot overlap a panel.
        axis.set_yticks(
            range(len(methods)), [METHOD_NAMES[m] for m in methods] if axis is axes[0][0] else [], fontsize=7
        )
        axis.set_title(
            f"{FAMILY_NAMES_SHORT[family]}, {PARTITION_NAMES[partition]}, {fraction * 100:g}% malicious", fontsize=9
        )
    figure.colorbar(
        image,
        ax=list(axes[0]),
        label=f"best perplexity above the oracle's (%, colour clipped to 0-{top:g})",
        shrink=0.8,
    )
    save(figure, path, bbox_inches="tight")
    plt.close(figure)
    return path


def save(figure, path: Path, **kwargs) -> None:
    """Write ``figure`` to ``path`` as SVG, the same bytes for the same figure (atomically), and remove a PNG of the
    same name that an earlier version of the report wrote there."""
    import matplotlib

    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "fedlns-sim", "svg.fonttype": "path"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None}, **kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, buffer.getvalue())
    path.with_suffix(".png").unlink(missing_ok=True)


FAMILY_NAMES_SHORT = {"gpt": "GPT", "bert": "BERT", "llama": "LLaMA"}
