"""Default settings, in a module light enough for the plugin to import at start-up."""

DEFAULT_WARMUP = 3
DEFAULT_ITERS = 15
DEFAULT_TOLERANCE = 0.05
DEFAULT_ALPHA = 0.01
DEFAULT_CONFIDENCE = 0.99
