"""Headless engine: backends, sampling parameters, model files. Never imports textual or rich."""
