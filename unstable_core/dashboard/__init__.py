"""The live dashboard of a run: the ``console`` tracker and ``unstable watch`` draw it from the
metrics records (``state`` folds them, ``view`` draws them with rich, ``lines`` writes plain
lines when output is not a terminal, ``watch`` follows a run directory)."""
