"""The CLIC ECAL (CLIC_o2_v04) as the 3DGAN data set sees it: 25 x 25 cells of 5.1 mm, 25
sensitive layers of 0.5 mm silicon behind tungsten-alloy absorbers (17 of 2.4 mm, then 8 of
4.8 mm). Quantities follow REFERENCE section 2 and the PDG material tables."""

from dataclasses import dataclass

import numpy as np

CELLS = 25
CELL_MM = 5.1
THIN_LAYERS, THICK_LAYERS = 17, 8
THIN_ABSORBER_MM, THICK_ABSORBER_MM = 2.4, 4.8
SENSOR_MM = 0.5


@dataclass(frozen=True)
class Material:
    name: str
    Z: float
    A: float
    density: float  # g/cm3
    x0_g_cm2: float  # radiation length in g/cm2
    critical_mev: float
    dedx_mip: float  # minimum-ionising energy loss, MeV cm2/g

    @property
    def x0_mm(self) -> float:
        return 10 * self.x0_g_cm2 / self.density


TUNGSTEN = Material("W", 74, 183.84, 19.3, 6.76, 7.97, 1.145)
NICKEL = Material("Ni", 28, 58.69, 8.90, 12.68, 18.5, 1.406)
IRON = Material("Fe", 26, 55.85, 7.87, 13.84, 21.7, 1.451)
SILICON = Material("Si", 14, 28.09, 2.33, 21.82, 40.2, 1.664)


def _alloy() -> Material:
    """W 93 %, Ni 6.1 %, Fe 0.9 % by mass at 17.8 g/cm3 (Bragg additivity)."""
    parts = ((TUNGSTEN, 0.93), (NICKEL, 0.061), (IRON, 0.009))
    x0 = 1 / sum(w / m.x0_g_cm2 for m, w in parts)
    return Material(
        "W-alloy",
        sum(w * m.Z for m, w in parts),
        sum(w * m.A for m, w in parts),
        17.8,
        x0,
        x0 * sum(w * m.critical_mev / m.x0_g_cm2 for m, w in parts),
        sum(w * m.dedx_mip for m, w in parts),
    )


ABSORBER = _alloy()


@dataclass(frozen=True)
class Layer:
    absorber_mm: float
    start_x0: float  # depth where the layer's absorber begins
    end_x0: float  # depth where its sensor ends

    @property
    def mip_sampling_fraction(self) -> float:
        """Share of a minimum-ionising particle's energy loss seen by the silicon."""
        seen = SILICON.dedx_mip * SILICON.density * SENSOR_MM
        return seen / (seen + ABSORBER.dedx_mip * ABSORBER.density * self.absorber_mm)


def sampling_fraction_fit(ep_gev):
    """The 3DGAN fit of sum(cells) / Ep for electrons (REFERENCE section 2), as a fraction."""
    x = np.asarray(ep_gev, np.float64) / 100
    return (2.21 - 0.28 * x + 0.11 * x**2 - 0.023 * x**3 + 0.0018 * x**4) / 100


def layers() -> list[Layer]:
    out, depth = [], 0.0
    for absorber_mm in [THIN_ABSORBER_MM] * THIN_LAYERS + [THICK_ABSORBER_MM] * THICK_LAYERS:
        thickness = absorber_mm / ABSORBER.x0_mm + SENSOR_MM / SILICON.x0_mm
        out.append(Layer(absorber_mm, depth, depth + thickness))
        depth += thickness
    return out


def layer_edges_x0() -> np.ndarray:
    """Depth (X0) of the 26 layer boundaries."""
    ls = layers()
    return np.array([ls[0].start_x0] + [layer.end_x0 for layer in ls])


@dataclass(frozen=True)
class EffectiveMedium:
    """The absorber + sensor sandwich of the thin section, as GFlash's sampling formulas need it."""

    Z: float
    x0_mm: float
    moliere_mm: float
    critical_mev: float
    fs: float  # F_S = X0_eff / (d_absorber + d_sensor)
    e_hat: float  # sampling-fraction ratio electron/mip, 1 / (1 + 0.007 (Z1 - Z2))


def effective_medium(absorber_mm: float = THIN_ABSORBER_MM) -> EffectiveMedium:
    d = np.array([absorber_mm, SENSOR_MM])
    rho = np.array([ABSORBER.density, SILICON.density])
    mass = d * rho / np.sum(d * rho)
    z = float(np.sum(mass * [ABSORBER.Z, SILICON.Z]))
    rho_eff = float(np.sum(d * rho) / np.sum(d))
    x0_mm = 1 / float(np.sum(mass * rho_eff / (np.array([ABSORBER.x0_mm, SILICON.x0_mm]) * rho)))
    critical = x0_mm * float(
        np.sum(
            mass
            * np.array([ABSORBER.critical_mev, SILICON.critical_mev])
            / np.array([ABSORBER.x0_mm, SILICON.x0_mm])
        )
    )
    moliere_mm = 21.2052 * x0_mm / critical  # E_s = 21.2 MeV
    return EffectiveMedium(
        z,
        x0_mm,
        moliere_mm,
        critical,
        x0_mm / float(d.sum()),
        1 / (1 + 0.007 * (ABSORBER.Z - SILICON.Z)),
    )
