"""``gaptui tune``: the same hyperparameter search for every row of a family's table, resumable, on Optuna.

A preset's ``[tune]`` table (docs/tuning.md) asks for ``trials`` trials per row of its family's table (a model, a
pooling, a PE) at one column ``at`` (for alignment a noise level) on the ``seeds`` it names, searching the keys its
``space`` names among those the family declares (:attr:`engine.tasks.TaskFamily.tunable`). Every row gets the same
number of trials of the same epochs, and every trial keeps the preset's parameter budget (the width follows it), so
a ranking of tuned rows compares equal budgets.

A trial is an ordinary run: the preset's spec of that row and cell with the sampled values set, so its run id,
folder, events, record and resume are those of any run, and it goes through the same scheduler and slots as
``gaptui run``. Its record carries ``tune = {"study", "row", "trials"}`` and the tag ``study=NAME``; tables leave
trial runs out. The value of a trial is its metric averaged over its seeds.

The search is Optuna's, one study per row in one SQLite file per study (``<workspace>/tune/<study>.db``, which
``optuna-dashboard`` opens). What makes it resumable: a trial is asked (its values stored at once) before its runs
are queued, and told only once they all ended; a manager killed in between leaves the trial ``RUNNING`` in the
database, and the next ``gaptui tune`` takes it up again with the same values, so the runs are the same runs
(resumed from their checkpoints, or read back when they finished meanwhile) and no trial is counted twice.

``--final`` re-runs each row's best values on every cell of the preset with all its seeds; those runs carry
``tune.final`` and show in ``gaptui table --tuned`` as rows ``<row> (tuned)`` beside the default ones.
"""
