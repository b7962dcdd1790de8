"""Compute Planner's Python client and command line (`planner`)."""

import importlib.metadata

from planner_client.client import PlannerClient, ProblemError

__version__ = importlib.metadata.version("compute-planner-client")  # the release's (README, Versions)

__all__ = ["PlannerClient", "ProblemError", "__version__"]
