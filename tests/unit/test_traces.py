"""The plans of a Run's spans (``kubeturn.orchestrator.traces``, ADR 0107).

Cases:
- the trace id is the Run's uid when that is a UUID, and 128 bits of its hash otherwise;
  span ids are derived (the same uid and Turn give the same id, another Turn another);
- ``traceparent`` is the W3C header the Harness's wire accepts, sampled or not;
- a swept Turn's span: below the Run's span, its real start and end, its ``kubeturn.*``
  attributes and tokens, the sweep as an event with its cause and Submission;
- a Turn refused before admission has no sweep event, and fails its span;
- the Run's span is the root, an error only when the Run Failed;
- a sandbox's Harness gets the OTEL_* variables of the chart's ``tracing``, only when on.
"""

from __future__ import annotations

import re
from typing import Any

from kubeturn.api.tracing import HeadersSecret, SandboxTracing
from kubeturn.api.workspace import WorkspaceSpec
from kubeturn.k8s import objects
from kubeturn.orchestrator import traces
from kubeturn.orchestrator.ids import InstanceId, TurnId
from kubeturn.orchestrator.turns import Exit, SubmissionEntry, TurnRecord
from kubeturn_harness.wire import TRACEPARENT, Outcome, SubmissionId, Usage

UID = "7bbcbf82-1bd0-4968-81d2-a1a4913b6f0a"
SUB = SubmissionId("sub-1")


def record(*, outcome: Outcome = Outcome.ENDED, submissions: bool = True) -> TurnRecord:
    return TurnRecord(
        name=TurnId("t2"),
        agent="reviewer",
        state="reviewing",
        instanceId=InstanceId("default.r/root/reviewer/t-1"),
        outcome=outcome,
        cause="pick" if outcome is Outcome.ENDED else None,
        message=None if outcome is Outcome.ENDED else "refused before admission: cwd",
        submissions=[SubmissionEntry(id=SUB, admittedAt=10.5, outcome=outcome, settledAt=12.0)]
        if submissions
        else [],
        startedAt=10.0,
        settledAt=12.5,
        tokens=Usage(promptTokens=300, completionTokens=20) if submissions else None,
    )


def test_ids_are_derived_from_the_runs_uid_and_its_turns() -> None:
    assert f"{traces.trace_id(UID):032x}" == UID.replace("-", "")
    assert traces.trace_id("not-a-uuid") == traces.trace_id("not-a-uuid") != 0
    assert traces.trace_id("not-a-uuid") != traces.trace_id("not-a-uuid-2")
    assert traces.turn_span_id(UID, "t1") == traces.turn_span_id(UID, "t1")
    assert traces.turn_span_id(UID, "t1") != traces.turn_span_id(UID, "t2")
    assert traces.turn_span_id(UID, "t1") != traces.run_span_id(UID)
    assert 0 < traces.run_span_id(UID) < 2**64


def test_traceparent_is_the_w3c_header() -> None:
    header = traces.traceparent(traces.trace_id(UID), 0xAB, sampled=True)
    assert header == f"00-{UID.replace('-', '')}-00000000000000ab-01"
    assert re.fullmatch(TRACEPARENT, header)
    assert traces.traceparent(1, 2, sampled=False).endswith("-00")


def test_a_swept_turns_span() -> None:
    plan = traces.turn_span(UID, "r", record(), Exit(cause="pick", submission=SUB, at=12.25))
    assert plan == traces.SpanPlan(
        name="invoke_agent reviewer",
        span_id=traces.turn_span_id(UID, "t2"),
        parent_id=traces.run_span_id(UID),
        start=10.0,
        end=12.5,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "reviewer",
            "kubeturn.run": "r",
            "kubeturn.turn": "t2",
            "kubeturn.agent": "reviewer",
            "kubeturn.state": "reviewing",
            "kubeturn.instance_id": "default.r/root/reviewer/t-1",
            "kubeturn.outcome": "ended",
            "kubeturn.submissions": 1,
            "kubeturn.cause": "pick",
            "kubeturn.tokens.input": 300,
            "kubeturn.tokens.output": 20,
        },
        events=(
            traces.SpanEvent(
                "kubeturn.sweep", 12.25, {"kubeturn.cause": "pick", "kubeturn.submission": SUB}
            ),
        ),
    )


def test_a_turn_refused_before_admission_has_no_sweep_and_fails() -> None:
    refused = record(outcome=Outcome.FAILED, submissions=False)
    plan = traces.turn_span(UID, "r", refused, Exit(cause=None, submission=None, at=10.0))
    assert plan.events == ()
    assert plan.error == "refused before admission: cwd"
    assert "kubeturn.cause" not in plan.attributes


def test_the_runs_span_is_the_root() -> None:
    plan = traces.run_span(
        UID, namespace="default", run="r", phase="Succeeded", started=1.0, ended=20.0
    )
    assert (plan.name, plan.parent_id, plan.span_id) == ("run", None, traces.run_span_id(UID))
    assert (plan.start, plan.end, plan.error) == (1.0, 20.0, None)
    assert plan.attributes == {
        "kubeturn.namespace": "default",
        "kubeturn.run": "r",
        "kubeturn.run.uid": UID,
        "kubeturn.phase": "Succeeded",
    }
    failed = traces.run_span(
        UID, namespace="default", run="r", phase="Failed", started=1.0, ended=2.0, message="no"
    )
    assert failed.error == "no"


WORKSPACE = {
    "apiVersion": "kubeturn.dev/v1alpha1",
    "kind": "Workspace",
    "metadata": {"name": "shared", "namespace": "team", "uid": "ws-uid"},
}


def harness_env(tracing: SandboxTracing | None) -> list[dict[str, Any]]:
    pod = objects.sandbox_pod(
        WORKSPACE,
        WorkspaceSpec.model_validate(
            {
                "repos": {"target": {"url": "https://git.example.invalid/a.git"}},
                "env": [{"name": "OTEL_SERVICE_NAME", "value": "mine"}],
            }
        ),
        image="harness:1",
        orchestrator_url="http://o",
        providers_yaml="{}\n",
        harness_token_sha256="t1",
        tracing=tracing,
    )
    (harness,) = [c for c in pod["spec"]["containers"] if c["name"] == "harness"]
    return list(harness["env"])


def test_a_sandboxs_harness_gets_the_otel_variables_only_when_tracing_is_on() -> None:
    """The chart's ``tracing`` reaches each Harness as OTEL_* variables, its headers from a
    Secret of the Workspace's namespace; the Workspace's own ``env`` comes after them, so it
    wins. Off, the Pod is as it was (the sandbox's fingerprint does not move)."""
    untraced = harness_env(None)
    assert harness_env(SandboxTracing()) == untraced
    assert [e["name"] for e in untraced if e["name"].startswith("OTEL_")] == ["OTEL_SERVICE_NAME"]
    traced = harness_env(
        SandboxTracing(
            endpoint="http://collector:4318",
            sampler="parentbased_traceidratio",
            samplerArg="0.25",
            headersSecret=HeadersSecret(name="otel"),
        )
    )
    added = [e for e in traced if e not in untraced]
    assert added == [
        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://collector:4318"},
        {"name": "OTEL_SERVICE_NAME", "value": "kubeturn-harness"},
        {
            "name": "OTEL_RESOURCE_ATTRIBUTES",
            "value": "k8s.namespace.name=team,kubeturn.workspace=shared",
        },
        {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
        {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "0.25"},
        {
            "name": "OTEL_EXPORTER_OTLP_HEADERS",
            "valueFrom": {"secretKeyRef": {"name": "otel", "key": "headers", "optional": True}},
        },
    ]
    assert traced[-1] == {"name": "OTEL_SERVICE_NAME", "value": "mine"}
