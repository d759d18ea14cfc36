"""Reference models that prove the toolkit on real work."""
