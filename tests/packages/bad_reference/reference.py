import numpy as np


def scale(x: np.ndarray, n: int) -> np.ndarray:
    return (2 * x[:-1]).astype(np.float32)  # the mistake: one element short
