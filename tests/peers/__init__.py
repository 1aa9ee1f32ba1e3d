"""Real xDS peers driven by the interop tests."""
