"""A vectorised GFlash (Grindhammer-Peters) simulator of electron showers in the CLIC ECAL.

The stand-in for the Geant4 3DGAN data set. Per shower: correlated (T, alpha) fluctuations of
the longitudinal gamma profile; energy deposited in steps of 0.1 X0 with Gamma-distributed
sampling fluctuations; each step's energy split over spots drawn from the two-component radial
profile (core + tail); silicon sees the deposit times its layer's sampling fraction. Formulas
and coefficients are those of REFERENCE section 3 (Geant4's GFlash coefficients, PDG constants
for critical energies).

Departures from Geant4, on purpose: a parametrisation, not a cascade (no individual particles,
no back-scatter, no transverse leakage between cells beyond the radial profile); one effective
medium (the thin-layer sandwich) for the profile parameters; the electron/MIP response
`ELECTRON_RESPONSE` is one constant fitted to the 3DGAN sampling-fraction curve over
10-500 GeV, not derived (the fall of the curve with energy is not fitted: it comes from leakage
and from the deeper showers reaching the thick layers); the energy resolution of the raw sum is
about 6 % at every energy, most of it from the per-shower depth fluctuation moving energy
between thin and thick layers; material between the sensor and the next absorber (PCB, air) is left out, so the stack
is 20.3 X0 instead of about 21-23.
"""

from dataclasses import dataclass

import numpy as np
from scipy.special import gammainc

from models.calogan import detector

STEP_X0 = 0.1
SAMPLING_STOCHASTIC = 0.11  # c_S: sampling resolution c_S / sqrt(E / GeV)
ELECTRON_RESPONSE = 0.676  # visible energy of an electron shower / that of MIPs of the same loss
POSITION_SIGMA_MM = 1.0  # spread of the entry point around the centre of the front face


@dataclass(frozen=True)
class Geometry:
    """Depth steps of the detector: each layer split evenly into steps of about 0.1 X0, so a
    step never straddles two layers."""

    step_edges: np.ndarray  # (S+1,) depth in X0
    step_layer: np.ndarray  # (S,) index of the layer each step lies in
    step_response: np.ndarray  # (S,) visible fraction of energy deposited in the step
    medium: detector.EffectiveMedium


def geometry() -> Geometry:
    edges = detector.layer_edges_x0()
    splits = [
        np.linspace(a, b, max(1, round((b - a) / STEP_X0)) + 1)[:-1]
        for a, b in zip(edges[:-1], edges[1:])
    ]
    step_layer = np.concatenate([np.full(len(part), k) for k, part in enumerate(splits)])
    fractions = np.array([lay.mip_sampling_fraction for lay in detector.layers()])
    return Geometry(
        np.append(np.concatenate(splits), edges[-1]),
        step_layer,
        ELECTRON_RESPONSE * fractions[step_layer],
        detector.effective_medium(),
    )


def simulate(
    energies_gev: np.ndarray, rng: np.random.Generator, geo: Geometry | None = None
) -> np.ndarray:
    """Showers (N, 25, 25, 25) [x, y, layer] of visible energy in GeV for electrons of `energies_gev`."""
    geo = geo or geometry()
    energies = np.asarray(energies_gev, np.float64)
    n = len(energies)
    alpha, beta, t_max = _longitudinal_parameters(energies, geo.medium, rng)
    fractions = np.diff(gammainc(alpha[:, None], beta[:, None] * geo.step_edges[None, :]), axis=1)
    deposit = energies[:, None] * fractions
    smeared = rng.gamma(
        np.maximum(deposit, 1e-12) / SAMPLING_STOCHASTIC**2, SAMPLING_STOCHASTIC**2
    ) * (deposit > 0)
    visible = smeared * geo.step_response[None, :]

    spots = np.where(
        fractions < 1e-7, 0, np.maximum(1, np.round(_spot_count(energies)[:, None] * fractions))
    ).astype(np.int64)
    shower, step = np.nonzero(spots)
    counts = spots[shower, step]
    tau = 0.5 * (geo.step_edges[step] + geo.step_edges[step + 1]) / t_max[shower]
    core, tail, p_core = _radial_parameters(tau, energies[shower], geo.medium)
    group = np.repeat(np.arange(len(counts)), counts)  # the (shower, step) of every spot
    total = len(group)
    radius = np.where(
        rng.random(total, np.float32) < p_core[group], core[group], tail[group]
    ).astype(np.float32)
    u = rng.random(total, np.float32) * np.float32(0.999999)
    r_cells = radius * np.sqrt(u / (1 - u)) * np.float32(geo.medium.moliere_mm / detector.CELL_MM)
    phi = rng.random(total, np.float32) * np.float32(2 * np.pi)
    origin = (
        rng.normal(0, POSITION_SIGMA_MM, (n, 2)) / detector.CELL_MM + detector.CELLS / 2
    ).astype(np.float32)
    spot_shower = shower[group]
    ix = np.floor(origin[spot_shower, 0] + r_cells * np.cos(phi)).astype(np.int64)
    iy = np.floor(origin[spot_shower, 1] + r_cells * np.sin(phi)).astype(np.int64)
    inside = (ix >= 0) & (ix < detector.CELLS) & (iy >= 0) & (iy < detector.CELLS)
    flat = (
        (spot_shower * detector.CELLS + ix) * detector.CELLS + iy
    ) * detector.CELLS + geo.step_layer[step][group]
    weights = (visible[shower, step] / counts)[group]
    cells = np.bincount(flat[inside], weights=weights[inside], minlength=n * detector.CELLS**3)
    return cells.reshape(n, detector.CELLS, detector.CELLS, detector.CELLS).astype(np.float32)


def _spot_count(energies_gev: np.ndarray) -> np.ndarray:
    return 10.3 / SAMPLING_STOCHASTIC * energies_gev**0.959


def _longitudinal_parameters(energies_gev, medium: detector.EffectiveMedium, rng):
    """Per-shower gamma-profile (alpha, beta) and depth of maximum T, with the sampling-
    calorimeter corrections and correlated fluctuations."""
    ln_y = np.log(energies_gev * 1e3 / medium.critical_mev)
    t_hom = np.exp(np.log(np.maximum(ln_y - 0.812, 1e-3)))
    alpha_hom = 0.81 + (0.458 + 2.26 / medium.Z) * ln_y
    t_mean = t_hom - 0.55 / medium.fs - 0.69 * (1 - medium.e_hat)
    alpha_mean = alpha_hom - 0.476 / medium.fs
    sigma_t = np.minimum(0.5, 1 / np.maximum(-2.5 + 1.25 * ln_y, 1e-3))
    sigma_a = np.minimum(0.5, 1 / np.maximum(-0.82 + 0.79 * ln_y, 1e-3))
    rho = 0.784 - 0.023 * ln_y
    z1, z2 = rng.standard_normal((2, len(energies_gev)))
    a, b = np.sqrt((1 + rho) / 2), np.sqrt((1 - rho) / 2)
    t = np.maximum(1.0, np.exp(np.log(np.maximum(t_mean, 1e-3)) + sigma_t * (a * z1 + b * z2)))
    alpha = np.maximum(
        1.1, np.exp(np.log(np.maximum(alpha_mean, 1e-3)) + sigma_a * (a * z1 - b * z2))
    )
    return alpha, (alpha - 1) / t, t


def _radial_parameters(tau, energies_gev, medium: detector.EffectiveMedium):
    """Core and tail radii (Moliere radii) and the core probability, per spot group."""
    z, ln_e, hat, fs = medium.Z, np.log(energies_gev), medium.e_hat, medium.fs
    core = 0.0251 + 0.00319 * ln_e + (0.1162 - 0.000381 * z) * tau
    k4 = 0.3585 + 0.0412 * ln_e
    tail = (0.659 - 0.00309 * z) * (np.exp(-2.59 * (tau - 0.645)) + np.exp(k4 * (tau - 0.645)))
    p2, p3 = 0.401 + 0.00187 * z, 1.313 - 0.0686 * ln_e
    p_core = (2.632 - 0.00094 * z) * np.exp((p2 - tau) / p3 - np.exp((p2 - tau) / p3))
    core = core - 0.0203 * (1 - hat) + 0.0397 * np.exp(-tau) / fs
    tail = tail - 0.14 * (1 - hat) - 0.495 * np.exp(-tau) / fs
    p_core = p_core + (1 - hat) * (0.348 - 0.642 * np.exp(-((tau - 1) ** 2)) / fs)
    return np.maximum(core, 1e-3), np.maximum(tail, core), np.clip(p_core, 0.0, 1.0)
