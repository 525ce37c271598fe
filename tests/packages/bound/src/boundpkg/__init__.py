"""A package whose kernels are bound by r1build (boundpkg._k)."""
