import numpy as np


def scale(x: np.ndarray, n: int) -> np.ndarray:
    return (2 * x).astype(np.float32)
