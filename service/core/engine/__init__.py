"""The planning engine: a budget and a rule in, an allocation with its estimate and caveats out.

It only composes the other core modules (units, laws, allocate, cluster, wall_clock, hyper, caveats); the
formulas and their sources live there. Inputs are resolved values (a hardware profile, a law), never names to
look up. Callers use what this package exports; its modules, by job:

* `inputs`: Hardware, Cluster, NamedLaw, Budget, and the price a run is costed at;
* `run`: the cluster model's run of a model (shape, machine, layout search, accelerator count);
* `estimate`: a run's time, accelerator-hours, cost and memory, modelled or at a given MFU;
* `limits`: a budget's limits as FLOPs, and which binds;
* `rules`: the rule that allocates a budget, and the caveats of repeated data;
* `serving`: serving the inference tokens;
* `intervals`: intervals over a fitted law's bootstrap fits;
* `plans`: one allocation of a budget, or a model already chosen, as a Plan;
* `sizing`: `plan`, a budget sized at the utilisation its model achieves, on the count it chooses.
"""

from __future__ import annotations

from service.core.engine.estimate import Estimate, RunIntervals, estimate, step_of
from service.core.engine.inputs import (
    DEFAULT_OPTIMIZER,
    DEFAULT_PRECISION,
    Budget,
    Cluster,
    Hardware,
    NamedLaw,
    published,
)
from service.core.engine.intervals import MAX_INTERVAL_FITS, Intervals, frontier_intervals
from service.core.engine.limits import CLUSTER_LIMITS, DEFAULT_MFU, Limit
from service.core.engine.plans import Plan, fixed
from service.core.engine.rules import EPOCHS_WITHOUT_GAIN, InferenceSummary, Rules
from service.core.engine.run import (
    ASSUMED_FLOPS_PER_MEMORY_BYTE,
    ASSUMED_NETWORK,
    SHAPE_TOLERANCE,
    machine_of,
    model_run,
    run_overhead_of,
)
from service.core.engine.serving import SERVING_PRECISIONS, Serving
from service.core.engine.sizing import MAX_ROUNDS, UTILISATION_TOLERANCE, plan

# 1.1: allocations with a bootstrapped law carry intervals. 1.2: activations without sequence parallelism,
# DeepSeek's hints at their own C = M·D when the shape is known (and saying which C), the
# repetition_constants_from_c4 caveat, extrapolation distances near the range in percent or as a factor.
# 1.3: inference-aware allocation of a training budget; inference FLOPs, and the cost of serving.
# 2.0: wall-clock time from the cluster model (core/performance.py) unless an MFU is given; layout search,
# goodput, and the cluster size chosen when none is given. 2.1: one accelerator-count policy
# (wall_clock.chosen): a budget that leaves the count to the planner gets a run within its days or, without,
# within a year, as a model already chosen did; the implausibly_long_run caveat on any run past a year.
# 2.2: a hardware's efficiencies are its profile's (performance.Efficiency), never read from its name; the
# uncalibrated_hardware caveat.
# 2.3: cluster model 1.3 (frameworks, tensor-parallel overlap, node-aware collectives, refitted constants),
# the run overhead, intervals on every estimate.
# 2.4: the run overhead of a hardware profile or an organisation's calibration, and whose it is.
# 2.5: a budget's sizing plans the counts around where its money and days bind together (a dense model's;
# a mixture of experts' are still scanned), its search for the utilisation converges instead of alternating,
# and an assumed shape keeps the proportions nearest width = 128 · layers (docs/decisions/0004).
ENGINE_VERSION = "2.5.0"

__all__ = [
    "ASSUMED_FLOPS_PER_MEMORY_BYTE",
    "ASSUMED_NETWORK",
    "CLUSTER_LIMITS",
    "DEFAULT_MFU",
    "DEFAULT_OPTIMIZER",
    "DEFAULT_PRECISION",
    "ENGINE_VERSION",
    "EPOCHS_WITHOUT_GAIN",
    "MAX_INTERVAL_FITS",
    "MAX_ROUNDS",
    "SERVING_PRECISIONS",
    "SHAPE_TOLERANCE",
    "UTILISATION_TOLERANCE",
    "Budget",
    "Cluster",
    "Estimate",
    "Hardware",
    "InferenceSummary",
    "Intervals",
    "Limit",
    "NamedLaw",
    "Plan",
    "Rules",
    "RunIntervals",
    "Serving",
    "estimate",
    "fixed",
    "frontier_intervals",
    "machine_of",
    "model_run",
    "plan",
    "published",
    "run_overhead_of",
    "step_of",
]
