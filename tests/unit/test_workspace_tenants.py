"""``workspaces.Tenants``: which Runs name which Workspace, from the Run watch's events.

Cases:
- a Run counted in the Workspace it names, active until its phase is a finished one;
- a Run that names another Workspace is counted there and no longer in the first;
- a Run that names none, and one that went (or goes twice), counts nowhere;
- Runs of the same name in two namespaces are two Runs;
- a Workspace's occupancy is one object from the first ask on, counted at each ask.
"""

from __future__ import annotations

from kubeturn.k8s import workspaces


def test_a_run_is_counted_where_it_is_and_active_until_it_finishes() -> None:
    tenants = workspaces.Tenants()
    shared = tenants.of(("a", "shared"))
    tenants.saw("a", "one", "shared", True)
    tenants.saw("a", "two", "shared", True)
    assert shared.counts() == (2, 2)
    tenants.saw("a", "one", "shared", False)
    assert shared.counts() == (2, 1)
    assert tenants.of(("a", "shared")) is shared


def test_a_run_that_moves_or_names_none_is_counted_where_it_is_now() -> None:
    tenants = workspaces.Tenants()
    tenants.saw("a", "one", "shared", True)
    tenants.saw("a", "one", "other", True)
    assert tenants.of(("a", "shared")).counts() == (0, 0)
    assert tenants.of(("a", "other")).counts() == (1, 1)
    tenants.saw("a", "one", None, True)
    assert tenants.of(("a", "other")).counts() == (0, 0)


def test_a_run_that_went_counts_nowhere() -> None:
    tenants = workspaces.Tenants()
    tenants.saw("a", "one", "shared", True)
    tenants.saw("b", "one", "shared", True)
    tenants.gone("a", "one")
    tenants.gone("a", "one")
    tenants.gone("a", "never")
    assert tenants.of(("a", "shared")).counts() == (0, 0)
    assert tenants.of(("b", "shared")).counts() == (1, 1)
    assert tenants.where == {("b", "one"): ("b", "shared")}
