"""A configuration as JSON (``Run.status`` holds it) and back, exactly."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kubeturn.machine.configuration import (
    Child,
    ChildStatus,
    Config,
    InvokeEntry,
    InvokeKind,
    Status,
    TimerEntry,
)
from kubeturn.machine.model import StatePath


def snapshot(config: Config) -> dict[str, Any]:
    """The configuration as JSON; ``restore`` gives it back exactly."""
    return {
        "active": list(config.active),
        "context": config.context,
        "timers": [
            {
                "timer": t.timer,
                "state": t.state,
                "fireAt": t.fire_at,
                "cause": sorted(t.cause),
                "seq": t.seq,
            }
            for t in config.timers
        ],
        "invokes": [
            {"state": i.state, "kind": i.kind.value, "cause": sorted(i.cause), "seq": i.seq}
            for i in config.invokes
        ],
        "status": config.status.value,
        "output": config.output,
        "message": config.message,
        "seq": config.seq,
        "endedIn": list(config.ended_in),
        "finals": dict(config.finals),
        "children": [
            {
                "scope": c.scope,
                "invocation": c.invocation,
                "key": c.key,
                "index": c.index,
                "item": c.item,
                "context": c.context,
                "status": c.status.value,
                "output": c.output,
                "message": c.message,
            }
            for c in config.children
        ],
    }


def restore(data: Mapping[str, Any]) -> Config:
    return Config(
        active=tuple(StatePath(path) for path in data["active"]),
        context=dict(data["context"]),
        timers=tuple(
            TimerEntry(
                t["timer"],
                StatePath(t["state"]),
                float(t["fireAt"]),
                frozenset(t["cause"]),
                t["seq"],
            )
            for t in data["timers"]
        ),
        invokes=tuple(
            InvokeEntry(
                StatePath(i["state"]), InvokeKind(i["kind"]), frozenset(i["cause"]), i["seq"]
            )
            for i in data["invokes"]
        ),
        status=Status(data["status"]),
        output=data.get("output"),
        message=data.get("message"),
        seq=int(data["seq"]),
        ended_in=tuple(StatePath(path) for path in data.get("endedIn") or ()),
        finals={StatePath(k): v for k, v in (data.get("finals") or {}).items()},
        children=tuple(
            Child(
                scope=StatePath(c["scope"]),
                invocation=c["invocation"],
                key=c["key"],
                index=int(c["index"]),
                item=c.get("item"),
                context=dict(c["context"]),
                status=ChildStatus(c["status"]),
                output=c.get("output"),
                message=c.get("message"),
            )
            for c in data.get("children") or ()
        ),
    )


def with_context(config: Config, context: Mapping[str, Any]) -> Config:
    return replace(config, context=context)
