"""What r1build compiles and runs with: nvcc (where it is, which one it is, which archs it targets), the
preprocessor values and C source spans the gate and emitter share, and the optional Python extras.

The face imports nothing: the warm-build stamp imports :mod:`.lookup` (the standard library only) without the rest."""
