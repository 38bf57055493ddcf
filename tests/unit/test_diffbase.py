"""kopf's last-handled annotation holds a digest of what it handled, never a copy.

Cases:
- a Workspace of a 300 KiB spec gets an annotation under 200 bytes;
- the object unchanged, kopf reads back what it would store (no change); a changed spec,
  label or annotation of a user's is a change; its status, kubectl's copy of the
  manifest and kopf's own annotations are not;
- an older operator's annotation (the whole essence) reads as one change, whose patch
  puts the digest in its place;
- the operator registers no handler that reads a diff (on creation, resumption and
  deletion only), which is what makes a digest enough;
- an AgentTurn or a Run, new or changed, reads as handled as it is (kopf writes no record
  of it, and builds no essence): the operator's only changing handler on either is at
  their deletion.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import kopf
import pytest

from kubeturn.k8s import diffbase, operator
from kubeturn.k8s.hub import Hub
from kubeturn.settings import OperatorSettings

KEY = "kopf.zalando.org/last-handled-configuration"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def workspace(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Workspace",
        "metadata": {
            "name": "r",
            "namespace": "default",
            "labels": {"team": "a"},
            "annotations": {LAST_APPLIED: json.dumps({"spec": spec})},
        },
        "spec": spec,
        "status": {"phase": "Running"},
    }


def handled(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` after kopf stored what it handled of it (the annotation patched in)."""
    storage = diffbase.DigestDiffBaseStorage()
    patch = kopf.Patch()
    viewed = kopf.Body(body)
    storage.store(body=viewed, patch=patch, essence=storage.build(body=viewed))
    after = copy.deepcopy(body)
    after["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    return after


def changed(body: dict[str, Any]) -> bool:
    """Whether kopf sees a change: what it stored against what it would store now."""
    storage = diffbase.DigestDiffBaseStorage()
    viewed = kopf.Body(body)
    return storage.fetch(body=viewed) != storage.build(body=viewed)


def test_a_large_spec_gets_a_small_annotation() -> None:
    after = handled(workspace({"input": "x" * 300 * 1024}))
    assert len(after["metadata"]["annotations"][KEY].encode()) < 200


def test_what_is_a_change_and_what_is_not() -> None:
    body = handled(workspace({"input": "a"}))
    assert not changed(body)
    spec = copy.deepcopy(body)
    spec["spec"]["input"] = "b"
    label = copy.deepcopy(body)
    label["metadata"]["labels"]["team"] = "b"
    annotation = copy.deepcopy(body)
    annotation["metadata"]["annotations"]["note"] = "hello"
    assert [changed(spec), changed(label), changed(annotation)] == [True, True, True]
    status = copy.deepcopy(body)
    status["status"]["phase"] = "Succeeded"
    applied = copy.deepcopy(body)
    applied["metadata"]["annotations"][LAST_APPLIED] = "{}"
    kopfs = copy.deepcopy(body)
    kopfs["metadata"]["annotations"]["kopf.zalando.org/touch-dummy"] = "now"
    kopfs["metadata"]["annotations"]["kopf.zalando.org/kopf-managed"] = "yes"
    assert [changed(status), changed(applied), changed(kopfs)] == [False, False, False]


def test_an_older_operators_copy_is_one_change_replaced_by_the_digest() -> None:
    body = workspace({"input": "a"})
    essence = kopf.AnnotationsDiffBaseStorage().build(body=kopf.Body(body))
    body["metadata"]["annotations"][KEY] = json.dumps(essence) + "\n"
    assert changed(body)
    after = handled(body)
    assert not changed(after)
    assert json.loads(after["metadata"]["annotations"][KEY]).keys() == {diffbase.DIGEST}


def test_no_handler_reads_a_diff() -> None:
    hub = Hub(kube=None, settings=OperatorSettings())  # type: ignore[arg-type]
    registry = operator.build(hub, None)  # type: ignore[arg-type]
    handlers = list(registry._changing.get_all_handlers())
    assert handlers
    for handler in handlers:
        on_create_resume_or_delete = handler.reason in (
            kopf.Reason.CREATE,
            kopf.Reason.DELETE,
        ) or (handler.reason is None and handler.initial)
        assert on_create_resume_or_delete, handler.id
        assert handler.field is None, handler.id


@pytest.mark.parametrize(("kind", "plural"), [("AgentTurn", "agentturns"), ("Run", "runs")])
def test_an_agentturn_or_a_run_is_handled_as_it_is(kind: str, plural: str) -> None:
    """kopf stores no record of an AgentTurn or a Run: every version of one, new or
    changed, reads as handled (the operator handles them by changing handlers at deletion
    only, as a test here checks)."""
    body = workspace({"turn": "t1"}) | {"kind": kind}
    assert not changed(body)
    body["spec"]["turn"] = "t2"
    body["metadata"]["labels"]["team"] = "b"
    assert not changed(body)
    assert changed(workspace({"input": "a"})), "a Workspace never handled is a change"
    hub = Hub(kube=None, settings=OperatorSettings())  # type: ignore[arg-type]
    registry = operator.build(hub, None)  # type: ignore[arg-type]
    reasons = [
        handler.reason
        for handler in registry._changing.get_all_handlers()
        if handler.selector is not None and handler.selector.any_name == plural
    ]
    assert reasons == [kopf.Reason.DELETE]
