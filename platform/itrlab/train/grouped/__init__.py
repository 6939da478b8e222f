"""Grouped training: G runs of one model shape trained together in one process, as one batched model.

This package is its home: how a group trains and which runs may form one. Who calls what:

* :mod:`itrlab.train.grouped.membership`: which runs can be members (``group_refusal``), which runs
  share a step (``shared_step``: ``group_key`` and ``model_signature``; ``describe_shape`` in words) and
  how runs are packed into groups of G (``pack_groups``), from their configs alone. Called by the
  sweep's groups (:mod:`itrlab.sweep.groups`) and the benchmark.
* :mod:`itrlab.train.grouped.trainer`: :class:`~itrlab.train.grouped.trainer.GroupedTrainer`, the
  members' parameters stacked and stepped as one ``torch.func.vmap``-ed model; ``step_class_key``
  for the dry run's cost (:mod:`itrlab.sweep.dry_run`). Called by :mod:`~itrlab.train.grouped.run`
  and the benchmark.
* :mod:`itrlab.train.grouped.run`: ``run_group``, the group's ``run_experiment``: each member built,
  opened and finished as its own run (:mod:`itrlab.train.experiment`), trained by the
  ``GroupedTrainer``. Called by the sweep's group trial (:mod:`itrlab.sweep.group_trial`).

Outside the package, each where its layer puts it (``docs/architecture.md``, "Layering"):

* :mod:`itrlab.models.batched` (layer ``models``): the vmap-able model parts (``MaskedGRU``, padded
  cross-attention scoring) that ``GroupedTrainer`` swaps in; the encoders read ``MaskedGRU``, so it
  cannot sit above them.
* :mod:`itrlab.sweep.groups` and :mod:`itrlab.sweep.group_trial` (layer ``sweep``, Ray Tune): the
  sweep asks for groups (``group: G``: its trials packed by ``pack_groups`` above, one Tune trial
  per group) and has each one trained by ``run_group``; it knows not how a group trains.
* ``benchmarks/group.py`` (outside the package): a group's throughput against its runs one at a time.
"""
