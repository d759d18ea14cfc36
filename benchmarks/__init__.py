"""Side-by-side benchmarks: this toolkit against the rival quantizers on the same model."""
