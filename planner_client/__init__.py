"""Compute Planner's Python client and command line (`planner`)."""

from planner_client.client import PlannerClient, ProblemError

__all__ = ["PlannerClient", "ProblemError"]
