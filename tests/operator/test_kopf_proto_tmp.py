import asyncio
import logging
import time

import kopf

RUNS = "/apis/kubeturn.dev/v1alpha1/namespaces/default/runs"


def build_operator(server: str, seen: list[str]) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_):
        settings.posting.enabled = True

    @kopf.on.login(registry=registry)
    async def login(**_):
        return kopf.ConnectionInfo(server=server, default_namespace="default")

    @kopf.on.create("kubeturn.dev", "v1alpha1", "runs", registry=registry)
    async def created(patch: kopf.Patch, name: str, **_):
        seen.append(f"create {name}")
        patch.status["phase"] = "Accepted"

    @kopf.on.delete("kubeturn.dev", "v1alpha1", "runs", registry=registry)
    async def deleted(name: str, **_):
        seen.append(f"delete {name}")

    return registry


async def until(predicate, timeout=10.0):
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)


async def test_kopf(k8s, caplog):
    caplog.set_level(logging.DEBUG)
    seen = []
    registry = build_operator(str(k8s.url).rstrip("/"), seen)
    stop = asyncio.Event()
    ready = asyncio.Event()
    t0 = time.monotonic()
    task = asyncio.create_task(
        kopf.operator(
            registry=registry,
            standalone=True,
            namespaces=["default"],
            stop_flag=stop,
            ready_flag=ready,
        )
    )
    await asyncio.wait_for(ready.wait(), 10)
    print("ready", time.monotonic() - t0)
    async with k8s.post(RUNS, json={"metadata": {"name": "r1"}, "spec": {}}) as r:
        assert r.status == 201
    await until(
        lambda: (
            (k8s.read_object("kubeturn.dev/v1alpha1/runs", "default", "r1") or {})
            .get("status", {})
            .get("phase")
            == "Accepted"
        )
    )
    print(
        "created",
        time.monotonic() - t0,
        k8s.read_object("kubeturn.dev/v1alpha1/runs", "default", "r1"),
    )
    async with k8s.delete(RUNS + "/r1") as r:
        print(r.status, await r.json())
    await until(lambda: k8s.read_object("kubeturn.dev/v1alpha1/runs", "default", "r1") is None)
    print("deleted", time.monotonic() - t0, seen)
    print("STOPPING"); stop.set()
    await asyncio.sleep(2)
    for t in asyncio.all_tasks(): print("TASK", t.get_name(), t.get_coro(), t.get_stack(limit=3))
    await asyncio.wait_for(task, 10)
    print("stopped", time.monotonic() - t0)
