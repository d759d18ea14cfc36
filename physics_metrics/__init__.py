"""Physics-inspired comparison of calorimeter showers (REFERENCE section 4).

open_showers(path)                      a 3DGAN-layout HDF5 file, checked, read in chunks
Showers                                 what compare streams: a file, or any object whose
                                        chunks(size) yields (showers GeV, primary energies)
compare(reference, generated, bins)     per energy bin: separation power of every feature,
                                        the 3DGAN combined metric, mean profiles
"""

from physics_metrics.compare import Comparison, compare
from physics_metrics.showerfile import ShowerFile, Showers, open_showers

__all__ = ["Comparison", "ShowerFile", "Showers", "compare", "open_showers"]
