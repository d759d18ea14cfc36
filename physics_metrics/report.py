"""The physics validation of shower generators, as data and as one HTML section with plots.

Every candidate (FP32, INT8, rival INT8s) is compared with the simulated reference (is the
physics right?) and with a baseline candidate, normally FP32 on the same latents (what did
quantization alone change?). The plots are those of the 3DGAN validation: sampling fraction
against Ep, longitudinal and transverse profiles, the cell-energy spectrum and the moments.
"""

import base64
import html
import io

import numpy as np

from physics_metrics.compare import DEFAULT_BINS_GEV, EDGES, HALF_WIDTH_GEV, compare
from physics_metrics.showerfile import Showers

PLOTTED_FEATURES = ("m1_z", "m2_z", "m2_x", "hits")
FEATURE_LABELS = {
    "m1_z": "mean depth (layer)",
    "m2_z": "longitudinal spread (layers²)",
    "m2_x": "transverse spread x (cells²)",
    "hits": "cells above threshold",
    "cell_log10_energy": "log10 cell energy (GeV)",
}


def physics_report(
    reference: Showers,
    candidates: dict[str, Showers],
    baseline: str,
    bins=DEFAULT_BINS_GEV,
    half_width: float = HALF_WIDTH_GEV,
) -> dict:
    """Each candidate against the reference and, except the baseline itself, against the baseline."""

    def versus(ref: Showers, label: str) -> dict:
        return compare(ref, candidates[label], bins, half_width).to_dict()

    return {
        "bins_gev": list(bins),
        "half_width_gev": half_width,
        "baseline": baseline,
        "vs_reference": {label: versus(reference, label) for label in candidates},
        "vs_baseline": {
            label: versus(candidates[baseline], label) for label in candidates if label != baseline
        },
    }


def worst_separation(comparison: dict) -> tuple[str, float]:
    feature = max(comparison["max_separation"], key=comparison["max_separation"].get)
    return feature, comparison["max_separation"][feature]


def max_sf_shift(comparison: dict) -> float:
    return max(abs(row["sampling_fraction_shift"]) for row in comparison["bins"])


def physics_html(report: dict) -> str:
    """Tables and embedded PNG plots; needs matplotlib."""
    return _tables(report) + "".join(
        f"<h3>{html.escape(title)}</h3><img src='data:image/png;base64,{png}'>"
        for title, png in _figures(report)
    )


def _tables(report: dict) -> str:
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(label)}</td><td>{c['combined_3dgan']:.3f}</td><td>{worst_separation(c)[1]:.3f} ({e(worst_separation(c)[0])})</td>"
        f"<td>{100 * max_sf_shift(c):.2f} %</td></tr>"
        for label, c in report["vs_reference"].items()
    )
    vs_reference = (
        "<h3>Against the simulated reference</h3><table><tr><th>generator</th><th>3DGAN metric</th>"
        f"<th>max separation power (feature)</th><th>max |SF shift|</th></tr>{rows}</table>"
    )
    rivals = report["vs_baseline"]
    if not rivals:
        return vs_reference
    features = list(next(iter(rivals.values()))["max_separation"])
    best = {f: min(c["max_separation"][f] for c in rivals.values()) for f in features}
    cells = "".join(
        f"<tr><td>{e(f)}</td>"
        + "".join(
            f"<td>{_bold_if(c['max_separation'][f] == best[f], format(c['max_separation'][f], '.4f'))}</td>"
            for c in rivals.values()
        )
        + "</tr>"
        for f in features
    )
    shifts = "".join(f"<td>{100 * max_sf_shift(c):.2f} %</td>" for c in rivals.values())
    header = "".join(f"<th>{e(label)}</th>" for label in rivals)
    return vs_reference + (
        f"<h3>Against {e(report['baseline'])} on the same latents: what quantization alone changed</h3>"
        f"<p>Largest separation power over the energy bins, per feature (lowest in bold).</p>"
        f"<table><tr><th>feature</th>{header}</tr>{cells}<tr><td>max |SF shift|</td>{shifts}</tr></table>"
    )


def _bold_if(condition: bool, text: str) -> str:
    return f"<b>{text}</b>" if condition else text


def compact(report: dict) -> dict:
    """The report without the per-bin histograms and profiles (the plots' raw data), for JSON files."""

    def strip(comparison: dict) -> dict:
        return dict(
            comparison,
            bins=[
                {k: v for k, v in row.items() if k not in ("histograms", "profiles")}
                for row in comparison["bins"]
            ],
        )

    return dict(
        report,
        vs_reference={k: strip(c) for k, c in report["vs_reference"].items()},
        vs_baseline={k: strip(c) for k, c in report["vs_baseline"].items()},
    )


def _figures(report: dict) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = report["vs_reference"]
    first = next(iter(curves.values()))["bins"]
    shown = [first[0], first[len(first) // 2], first[-1]] if len(first) >= 3 else first
    shown_energies = [row["energy_gev"] for row in shown]

    def rows_at(comparison: dict) -> list[dict]:
        return [row for row in comparison["bins"] if row["energy_gev"] in shown_energies]

    figures = []
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(
        [r["energy_gev"] for r in first],
        [r["sampling_fraction_reference"] for r in first],
        "ko",
        label="simulation",
    )
    for label, c in curves.items():
        ax.plot(
            [r["energy_gev"] for r in c["bins"]],
            [r["sampling_fraction_generated"] for r in c["bins"]],
            "-",
            marker=".",
            label=label,
        )
    ax.set(xlabel="Ep (GeV)", ylabel="mean sum / Ep")
    ax.legend(fontsize=8)
    figures.append(("Sampling fraction against primary energy", _png(fig)))

    for axis, title in (("z", "Longitudinal profile"), ("x", "Transverse profile (x)")):
        fig, axes = plt.subplots(1, len(shown), figsize=(4 * len(shown), 3.2), squeeze=False)
        for ax, ref_row in zip(axes[0], shown):
            ax.semilogy(ref_row["profiles"][axis]["reference"], "k", lw=2, label="simulation")
            for label, c in curves.items():
                ax.semilogy(_row_at(c, ref_row)["profiles"][axis]["generated"], label=label)
            ax.set(
                title=f"{ref_row['energy_gev']:.0f} GeV",
                xlabel="layer" if axis == "z" else "cell x",
                ylabel="energy fraction",
            )
        axes[0][0].legend(fontsize=7)
        figures.append((title, _png(fig)))

    for names, title in (
        (["cell_log10_energy"], "Cell-energy spectrum"),
        (PLOTTED_FEATURES, "Moments and hit multiplicity"),
    ):
        fig, axes = plt.subplots(
            len(names), len(shown), figsize=(4 * len(shown), 3 * len(names)), squeeze=False
        )
        for i, name in enumerate(names):
            for ax, ref_row in zip(axes[i], shown):
                _step(
                    ax,
                    name,
                    ref_row["histograms"][name]["reference"],
                    "simulation",
                    color="k",
                    lw=2,
                )
                for label, c in curves.items():
                    _step(ax, name, _row_at(c, ref_row)["histograms"][name]["generated"], label)
                ax.set(
                    title=f"{ref_row['energy_gev']:.0f} GeV", xlabel=FEATURE_LABELS.get(name, name)
                )
                if name == "cell_log10_energy":
                    ax.set_yscale("log")
                if name.startswith("m2_"):
                    ax.set_xscale("log")  # binned in equal ratios
        axes[0][0].legend(fontsize=7)
        figures.append((title, _png(fig)))
    return figures


def _row_at(comparison: dict, ref_row: dict) -> dict:
    return next(r for r in comparison["bins"] if r["energy_gev"] == ref_row["energy_gev"])


def _step(ax, name: str, counts, label: str, **style) -> None:
    counts = np.asarray(counts, float)
    ax.stairs(counts / max(counts.sum(), 1), EDGES[name], label=label, **style)


def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=72)
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()
