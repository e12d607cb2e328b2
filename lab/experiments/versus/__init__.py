"""Two configurations of one experiment measured side by side in one run, their processes interleaved
(`--vs KEY=VALUE`): the configuration (lab.experiments.versus.config) and the run (lab.experiments.versus.run)."""

from lab.experiments.versus.config import parse_vs
from lab.experiments.versus.run import run_versus

__all__ = ["parse_vs", "run_versus"]
