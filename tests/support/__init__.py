"""Test helpers shared across the test folders: what many tests would otherwise build by hand."""
