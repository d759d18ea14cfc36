"""The CERN 3DGAN calorimeter shower generator and its data: a GFlash-style simulator of the
CLIC electromagnetic calorimeter writing the 3DGAN HDF5 layout."""
