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
DESSERT_X = np.array([  # embedded_sentence, printed in full
    [0.3374, -0.1778, -0.3035],
    [0.1794, 1.8951, 0.4954],
    [0.2692, -0.0770, -1.0205],
    [-0.2196, -0.3792, 0.7671],
    [-0.5880, 0.3486, 0.6603],
    [-1.1925, 0.6984, -1.4097],
])
DESSERT_OMEGA_24 = 1.2903  # query_2.dot(keys[4])
DESSERT_SHAPES = (6, 3, 2, 4)  # n, d, d_k (= d_q), d_v, as the torch.Size lines print them

# The pronoun walkthrough (seed 000) prints these, in this order, plus what the issue and the
# README quote at the precision the preset was designed to (13.83, 7.99, 0.883).
PRONOUN_Q_SHE = [2.64, 1.46, 0.94]
PRONOUN_K_DOG = [2.88, 3.06, 1.89]
PRONOUN_K_BALL = [2.73, 0.81, 1.52]
PRONOUN_SCORE_DOG = 13.83   # printed as 13.8
PRONOUN_SCORE_BALL = 9.8
PRONOUN_SCALED_DOG = 7.99   # ÷√3
PRONOUN_WEIGHT_DOG = 0.883
PRONOUN_WEIGHT_BALL = 0.087
