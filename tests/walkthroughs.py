"""The numbers the dessert walkthrough (../shared/seeds) prints, copied once for every test
that checks them (engine, presets, the export command). Four decimals, as printed."""

import numpy as np

DESSERT_X_2 = [0.1794, 1.8951, 0.4954]  # the embedding of the second token, "is"
DESSERT_SCORES_2 = [-0.6004, 3.4707, -1.5023, 0.4991, 1.2903, -1.3374]  # ω₂, before scaling
DESSERT_WEIGHTS_2 = [0.0386, 0.6870, 0.0204, 0.0840, 0.1470, 0.0229]  # α₂
DESSERT_OUTPUT = np.array([  # the 6×4 tensor printed at the end; row 1 is the context vector z₂
    [-0.1564, 0.1028, -0.0763, -0.0764],
    [0.5313, 1.3607, 0.7891, 1.3110],
    [-0.3542, -0.1234, -0.2627, -0.3706],
    [0.0071, 0.3345, 0.0969, 0.1998],
    [0.1008, 0.4780, 0.2021, 0.3674],
    [-0.5296, -0.2799, -0.4107, -0.6006],
])
