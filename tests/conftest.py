"""Shared fixtures and hypothesis settings for the test suite."""

import os

from hypothesis import HealthCheck, settings

# CI machines are small and shared: fewer, deterministic examples, no deadline flakiness.
settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
