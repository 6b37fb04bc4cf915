"""Default settings, in a module light enough for the plugin to import at start-up."""

DEFAULT_WARMUP = 3
DEFAULT_ITERS = 15
DEFAULT_TOLERANCE = 0.05
DEFAULT_ALPHA = 0.01
DEFAULT_CONFIDENCE = 0.99
#: Seconds of timed sampling per trace before the verdict is ``unsure`` (``--mystique-budget``).
DEFAULT_BUDGET_S = 20.0
#: Run-to-run scatter of a trace's level that sampling inside one process cannot remove
#: (``--mystique-noise``; measured by benchmarks/stat_power.py on 2-core CI machines).
DEFAULT_NOISE = 0.02
#: How far a whole sampling session's probe-normalised level moves with the machine's state from
#: one session to another (hours or days apart) beyond what the probe cancels: one draw per side of
#: a comparison, which no number of processes averages out (``--mystique-drift``; measured by
#: benchmarks/stat_power.py on 2-core CI machines).
DEFAULT_DRIFT = 0.01
#: A segment lasts about this long (iterations are added until it does).
SEGMENT_S = 0.5
#: Most fresh worker processes a new baseline is sampled in (``--mystique-runs``), and the most a
#: comparison adds while its verdict is open (both within the budget: on the CI host, 3 s a run).
DEFAULT_RUNS = 16
#: Worker processes per environment in ``mystique ab`` (``--workers``): its rounds cycle through
#: the pairs, so each process's own offset weighs a third in the estimate.
DEFAULT_AB_WORKERS = 3
