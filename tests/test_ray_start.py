"""What a sweep's own local Ray starts (:func:`itrlab.sweep.cluster.init_ray`): its dashboard only where a
trial needs it (a TorchTrainer) or the user asks for it, and a bad ``$ITRLAB_RAY_DASHBOARD`` refused."""

from __future__ import annotations

import pytest
import ray
from ray._private import ray_constants

from itrlab.errors import UserInputError
from itrlab.sweep import cluster


@pytest.fixture
def init_options(monkeypatch):
    """The options ``init_ray`` passes to ``ray.init`` (recorded, no Ray started), with no cluster to join."""
    seen: dict = {}
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(cluster.DASHBOARD_ENV, raising=False)
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "1")  # restored after loopback_options sets it
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", ray_constants.ENABLE_RAY_CLUSTER)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: seen.update(kwargs))
    return seen


@pytest.mark.parametrize(
    "needed, env, started",
    [(False, None, False), (True, None, True), (False, "1", True), (True, "0", True), (False, "0", False)],
)
def test_the_dashboard_starts_where_trials_need_it_or_the_user_asks(init_options, monkeypatch, needed, env, started):
    if env is not None:
        monkeypatch.setenv(cluster.DASHBOARD_ENV, env)
    assert cluster.init_ray("sqlite:///unused.db", dashboard=needed) is True
    assert init_options["include_dashboard"] is started
    assert init_options["dashboard_host"] == cluster.LOOPBACK


def test_a_bad_dashboard_setting_is_one_line_before_ray_starts(init_options, monkeypatch):
    monkeypatch.setenv(cluster.DASHBOARD_ENV, "yes")
    with pytest.raises(UserInputError, match=r"ITRLAB_RAY_DASHBOARD='yes': 1 \(start the Ray dashboard\) or 0"):
        cluster.init_ray("sqlite:///unused.db", dashboard=False)
    assert not init_options  # ray.init was not called


def test_joining_a_cluster_passes_no_dashboard_option(init_options, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    assert cluster.init_ray("sqlite:///unused.db", dashboard=False) is False
    assert "include_dashboard" not in init_options and init_options["address"] == "127.0.0.1:6379"


def test_the_sweep_refuses_a_bad_dashboard_setting_with_its_other_up_front_checks(monkeypatch):
    """``check_local_resources`` runs before the tracking store or the sweep's folder exist."""
    from itrlab.config.sweep import load_sweep

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv(cluster.DASHBOARD_ENV, "true")
    with pytest.raises(UserInputError, match="ITRLAB_RAY_DASHBOARD='true'"):
        cluster.check_local_resources(load_sweep("dbl_tiny"))
