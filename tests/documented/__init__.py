"""The trainings the manual documents, each checked to learn: a documented command that ends at chance says so.

* :mod:`~documented.catalogue`: every command of README.md's and docs/'s shell blocks that trains
  (``python jobs/train.py ...``, ``itrlab train ...``, a make target that runs one, a sweep that trains), read
  from the pages, each with the pages that show it;
* :mod:`~documented.page`: the dated page under docs/results/ that records each one's run here (its wall
  time, test rsum, chance range and verdict) or the reason it was not run, written and read back;
* :mod:`~documented.check`: what ``jobs/check_documented_trainings.py`` does: decides for each command
  whether it can run here, runs it as a user would (a process in the checkout's root) and reads its result.

The fast tier holds the manual to the newest page (tests/test_documented_trainings.py): a training command added
to a page and not run fails it; tests/test_documented_commands.py checks every one's config and dry run. It lives
beside the tests, which import it as their other helpers (``tests/`` on the path); the job puts ``tests/`` on
the path; the package ``itrlab`` never imports it.
"""
