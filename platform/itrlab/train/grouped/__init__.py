"""Grouped training: G runs of one model shape trained together in one process, as one batched model
(docs/training.md#grouped-training).

Who calls what: :mod:`~itrlab.train.grouped.membership` decides from configs alone which runs can be members
and packs them into groups of G (for :mod:`itrlab.sweep.groups` and the benchmark);
:mod:`~itrlab.train.grouped.trainer`'s ``GroupedTrainer`` steps the members as one ``torch.func.vmap``-ed model
(its ``step_class_key`` also prices the dry run, :mod:`itrlab.sweep.dry_run`); :mod:`~itrlab.train.grouped.run`'s
``run_group`` is the group's ``run_experiment``, each member its own run (for :mod:`itrlab.sweep.group_trial`,
one Tune trial per group). Outside the package, where the layers put them (docs/architecture.md, "Layering"):
the vmap-able model parts in :mod:`itrlab.models.batched` (the encoders read its ``MaskedGRU``, so it cannot sit
above them), and ``benchmarks/group.py``, a group's throughput against its runs one at a time.
"""
