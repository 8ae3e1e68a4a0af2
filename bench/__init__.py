"""Benchmarks (not tests): ``.venv/bin/python bench/<name>.py``. See docs/BENCHMARKS.md."""
