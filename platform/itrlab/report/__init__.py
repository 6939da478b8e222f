"""Reports of a finished sweep: the pivot in the paper's layout (means, intervals, differences, published
numbers), the ranking, plots, and the dated results page written from a parent run's summary."""
