"""The CERN 3DGAN calorimeter shower generator and its data: a GFlash-style simulator of the
CLIC electromagnetic calorimeter writing the 3DGAN HDF5 layout."""

LATENT = 200  # the generator's input: Gaussian noise x Ep/100 (here, so that no caller needs Keras)
