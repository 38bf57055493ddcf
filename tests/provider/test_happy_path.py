"""The Harness against llama.cpp's real server: a Turn that works, then ends by its pick.

Cases:
- the model calls a Working tool (``write``), then the Menu pick ``done``, which ends
  the Turn: the Submission settles ``ended``; the server received exactly two requests,
  and none after the Turn ended; the file is written; the second request carries the
  first call and its result as llama.cpp's chat template needs them; the usage in the
  record is what llama.cpp reported (its cached prompt tokens as cache reads), request by
  request, and in total.
"""

from __future__ import annotations

from typing import Any

from tests.provider.conftest import StartProviderWorld
from tests.provider.faults import Steer

IID = "iid-provider-1"
PROMPT = "Write a greeting to hello, then call done."


def done_surface(iid: str) -> dict[str, Any]:
    return {
        "instanceId": iid,
        "runId": "default.hello",
        "menu": [{"name": "done", "description": "The greeting is written.", "input": {}}],
        "allowed": ["done"],
    }


async def test_a_working_tool_then_a_pick_that_ends_the_turn(
    provider_world: StartProviderWorld,
) -> None:
    w = await provider_world()
    w.orchestrator.surfaces[IID] = done_surface(IID)

    async def on_pick(iid: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        await w.harness.abort(iid, {"cause": "pick", "submissionId": sid})
        return 200, {"delivered": True, "event": body["type"], "turnComplete": True}

    w.orchestrator.on_pick = on_pick
    w.proxy.steer(Steer("write"), Steer("done"))
    sid = await w.admit(IID, PROMPT)
    settled = await w.harness.settlement(IID, sid, timeout=60)

    assert settled["outcome"] == "ended"
    assert w.orchestrator.picks == [(IID, {"type": "done"})]
    assert (w.harness.workdir / "hello").read_text() == "hello"
    # The run is over once it settled: what the server received is final.
    assert [e.status for e in w.proxy.exchanges] == [200, 200]
    assert all(e.finished for e in w.proxy.exchanges)
    first, second = w.proxy.sent
    assert first["model"] == second["model"] == "tiny"
    assert first["stream"] is True
    assert {t["function"]["name"] for t in first["tools"]} >= {"write", "done"}
    assert "logit_bias" not in first  # the Harness sends none; the proxy steers
    call = second["messages"][-2]["tool_calls"][0]
    assert (call["function"]["name"], call["function"]["arguments"]) == (
        "write",
        '{"path": "hello", "content": "hello"}',
    )
    assert second["messages"][-1]["role"] == "tool"

    history = await w.harness.history(IID)
    answers = [m for m in history["messages"] if m["role"] == "assistant"]
    reported = [e.usage for e in w.proxy.exchanges]
    wanted = [
        {
            "promptTokens": u["prompt_tokens"],
            "completionTokens": u["completion_tokens"],
            "cacheReadTokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
            "cacheWriteTokens": 0,
            "cost": None,  # the providers file gives this model no price
        }
        for u in reported
        if u is not None
    ]
    assert [m["usage"] for m in answers] == wanted
    assert len(answers) == 2
    summed = {key: sum(u[key] for u in wanted) for key in wanted[0] if key != "cost"}
    assert settled["usage"] == {**summed, "cost": None}
