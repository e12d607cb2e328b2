"""The fake-prefix sweep (`lab sweep`, `lab arms`): its lifecycle, places, grid, points, estimate, rounds, plan and
its rates."""
