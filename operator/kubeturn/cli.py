"""The ``kubeturn`` command. The only place that reads the operator's environment.

``kubeturn operator`` runs the operator; ``kubeturn validate FILE...`` checks Run and
Workspace manifests with the same checks the operator runs, and prints every problem
with its path;
``kubeturn run FILE`` runs a Run on this machine (``kubeturn.local``); ``send``,
``cancel``, ``turns`` and ``status`` work on a local Run, or with ``--kube`` on a Run in a
cluster (``kubeturn.k8s.control``, imported only then: a local run needs no cluster).
``kubeturn logs`` prints a Run's transcripts (``kubeturn.transcripts``) from any
``TranscriptSource``: a local Run's is read from its workdir; with ``--kube``, through the
cluster's API server with the user's credentials (``kubeturn.k8s.transcript_client``,
imported only then).
``kubeturn version`` (or ``--version``) says which kubeturn this is.

Every command that prints objects takes one ``-o`` option, as kubectl's: ``table`` (the
default), ``wide`` (more columns), ``json`` or ``yaml``, whose times are RFC 3339 in UTC
(ADR 0069). ``send`` refuses, before it sends anything, an event the Run does not accept
now or data that misfits its schema, naming what the Run accepts (ADR 0067).

Every failure a person can fix is one line on stderr, ``kubeturn: what is wrong, where,
what to do``, and exit status 1; never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.metadata
import json
import logging
import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from kubeturn.api import cluster_checks, models
from kubeturn.api.common import GROUP
from kubeturn.api.durations import parse_duration
from kubeturn.api.egress import SandboxEgress
from kubeturn.api.status import FINISHED
from kubeturn.api.tracing import SandboxTracing
from kubeturn.api.validation import definition_errors, validate_workspace
from kubeturn.api.workspace import SandboxResources, carries_credentials, redacted
from kubeturn.errors import CommandError, DefinitionErrors, LeadershipLost
from kubeturn.local import control as local
from kubeturn.local import view
from kubeturn.local.workdir import DEFAULT_ROOT
from kubeturn.machine.load import load_run, parse_yaml, parse_yaml_documents
from kubeturn.orchestrator import signals
from kubeturn.settings import (
    LEASE_DURATION_S,
    RENEW_DEADLINE_S,
    RETRY_PERIOD_S,
    OperatorSettings,
)
from kubeturn.transcripts import EntryKind, Query, TranscriptSource, text

log = logging.getLogger(__name__)

EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
OUTPUTS = ("table", "wide", "json", "yaml")
"""``-o`` of every command that prints objects, as kubectl's."""


def version() -> str:
    """This kubeturn's version, as installed."""
    try:
        return importlib.metadata.version("kubeturn")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _parser() -> argparse.ArgumentParser:
    env = os.environ.get
    defaults = OperatorSettings()
    parser = argparse.ArgumentParser(prog="kubeturn", description="Run coding-agent workflows.")
    parser.add_argument(
        "--version",
        action="version",
        version=f"kubeturn {version()}",
        help="print kubeturn's version and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    shown = commands.add_parser("version", help="print kubeturn's version")
    _output(shown)

    operator = commands.add_parser("operator", help="run the Kubernetes operator")
    operator.add_argument(
        "--namespace",
        action="append",
        dest="namespaces",
        default=[n for n in env("KUBETURN_NAMESPACES", "").split(",") if n],
        help="a namespace to watch (repeatable; env KUBETURN_NAMESPACES, comma-separated); "
        "none watches the whole cluster",
    )
    operator.add_argument(
        "--harness-image",
        default=env("KUBETURN_HARNESS_IMAGE", defaults.harness_image),
        help="the image of every sandbox's Harness (env KUBETURN_HARNESS_IMAGE)",
    )
    operator.add_argument(
        "--require-confinement",
        action="store_true",
        default=env("KUBETURN_REQUIRE_CONFINEMENT", "") == "true",
        help="refuse to run tools where a node's kernel has no Landlock "
        "(env KUBETURN_REQUIRE_CONFINEMENT=true)",
    )
    operator.add_argument(
        "--turn-retention",
        default=env("KUBETURN_TURN_RETENTION") or None,
        metavar="DURATION",
        help="how long a settled AgentTurn stays visible to kubectl when its Run names no "
        "spec.turnRetention, e.g. 30m, 24h; 0s: it goes at once (env KUBETURN_TURN_RETENTION; "
        f"default {defaults.turn_retention_s:g}s)",
    )
    operator.add_argument(
        "--namespace-max-live-turns",
        type=live_turns,
        default=env("KUBETURN_NAMESPACE_MAX_LIVE_TURNS") or None,
        metavar="N",
        help="at most N Turns live at once in one namespace; the next wait, Pending, in the "
        "order they started (env KUBETURN_NAMESPACE_MAX_LIVE_TURNS; default: no cap)",
    )
    operator.add_argument(
        "--orchestrator-url",
        default=env("KUBETURN_ORCHESTRATOR_URL", defaults.orchestrator_url),
        help="where the Harnesses reach this operator's Orchestrator API "
        "(env KUBETURN_ORCHESTRATOR_URL)",
    )
    operator.add_argument(
        "--providers",
        type=Path,
        default=Path(p) if (p := env("KUBETURN_PROVIDERS")) else None,
        help="the model providers file every Harness gets (YAML: name → {type: openai or "
        "anthropic, baseUrl, apiKeyEnv, maxTokens, retry, timeouts}; env KUBETURN_PROVIDERS); "
        "refused at start when the Harness would refuse it",
    )
    operator.add_argument(
        "--api-port",
        type=int,
        default=env("KUBETURN_API_PORT", str(defaults.api_port)),
        help="the port of the Orchestrator API "
        f"(env KUBETURN_API_PORT; default {defaults.api_port})",
    )
    operator.add_argument(
        "--console-port",
        type=int,
        default=env("KUBETURN_CONSOLE_PORT", str(defaults.console_port)),
        help="the port of the console that the API server proxies console.kubeturn.dev to, "
        f"over TLS (env KUBETURN_CONSOLE_PORT; default {defaults.console_port})",
    )
    operator.add_argument(
        "--console-certificate",
        default=env("KUBETURN_CONSOLE_CERTIFICATE") or None,
        metavar="FILE",
        help="the console's serving certificate, PEM (env KUBETURN_CONSOLE_CERTIFICATE); "
        "none: the console is not served",
    )
    operator.add_argument(
        "--console-key",
        default=env("KUBETURN_CONSOLE_KEY") or None,
        metavar="FILE",
        help="the console certificate's private key, PEM (env KUBETURN_CONSOLE_KEY)",
    )
    operator.add_argument(
        "--default-model",
        default=env("KUBETURN_DEFAULT_MODEL") or None,
        metavar="PROVIDER/MODEL",
        help="the model of an Agent that names none, for every Workspace that names no "
        "spec.defaultModel (the chart's defaultModel; env KUBETURN_DEFAULT_MODEL); its "
        "provider must be one of --providers'",
    )
    operator.add_argument(
        "--lease",
        default=env("KUBETURN_LEASE") or None,
        metavar="NAME",
        help="elect one active replica by this coordination.k8s.io Lease in the operator's "
        "namespace (env KUBETURN_LEASE); none: no election, this replica is active at once "
        "(run only one)",
    )
    operator.add_argument(
        "--lease-duration",
        type=int,
        default=env("KUBETURN_LEASE_DURATION"),
        metavar="SECONDS",
        help="a standby takes the Lease this long after it last saw it renewed "
        f"(env KUBETURN_LEASE_DURATION; default {LEASE_DURATION_S})",
    )
    operator.add_argument(
        "--renew-deadline",
        type=float,
        default=env("KUBETURN_RENEW_DEADLINE"),
        metavar="SECONDS",
        help="the leader stops when it could not renew the Lease for this long "
        f"(env KUBETURN_RENEW_DEADLINE; default {RENEW_DEADLINE_S:g})",
    )
    operator.add_argument(
        "--retry-period",
        type=float,
        default=env("KUBETURN_RETRY_PERIOD"),
        metavar="SECONDS",
        help="how often a standby tries to take the Lease and the leader renews it "
        f"(env KUBETURN_RETRY_PERIOD; default {RETRY_PERIOD_S:g})",
    )
    operator.add_argument(
        "--operator-labels",
        default=env(
            "KUBETURN_OPERATOR_LABELS", ",".join(f"{k}={v}" for k, v in defaults.operator_labels)
        ),
        help="k=v,k=v: the operator pods' labels, which sandbox NetworkPolicies admit",
    )
    operator.add_argument(
        "--operator-namespace",
        default=env("KUBETURN_OPERATOR_NAMESPACE"),
        help="the operator's namespace: its pods' NetworkPolicy peer, and where its Lease is "
        "(env KUBETURN_OPERATOR_NAMESPACE)",
    )
    operator.add_argument(
        "--sandbox-egress",
        default=env("KUBETURN_SANDBOX_EGRESS", "{}"),
        help="JSON: what every sandbox may reach (the chart's sandbox.egress; env "
        "KUBETURN_SANDBOX_EGRESS); default: DNS, and the public internet on 443 and 22",
    )
    operator.add_argument(
        "--sandbox-tracing",
        default=env("KUBETURN_SANDBOX_TRACING", "{}"),
        help="JSON: where every sandbox's Harness exports its spans, {endpoint, sampler, "
        "samplerArg, headersSecret: {name, key}} (the chart's tracing; env "
        "KUBETURN_SANDBOX_TRACING); default: no endpoint, no tracing",
    )
    operator.add_argument(
        "--sandbox-resources",
        default=env("KUBETURN_SANDBOX_RESOURCES", "{}"),
        help="JSON: requests and limits of the sandbox containers, {harness, tools, clone} "
        "(the chart's sandbox.resources; env KUBETURN_SANDBOX_RESOURCES); a part left out "
        "keeps its default",
    )
    operator.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=env("KUBETURN_LOG_FORMAT", "text"),
        help="text, or one JSON object per line (env KUBETURN_LOG_FORMAT)",
    )
    operator.add_argument(
        "--kubeconfig",
        default=env("KUBECONFIG"),
        help="the kubeconfig (env KUBECONFIG); none: the pod's service account",
    )
    operator.add_argument(
        "--log-level",
        default=env("KUBETURN_LOG_LEVEL", "INFO"),
        help="DEBUG, INFO, WARNING or ERROR (env KUBETURN_LOG_LEVEL; default INFO)",
    )

    validate = commands.add_parser(
        "validate",
        help="check Run and Workspace manifests; exit 1 on any problem",
        description="Check Run and Workspace manifests (several documents per file, split by "
        "---) with the operator's checks, and print every problem of each with its manifest "
        "path. Exit status 1 on any problem.",
    )
    validate.add_argument(
        "files", nargs="+", type=Path, metavar="FILE", help="a YAML file of manifests"
    )
    validate.add_argument(
        "--cluster",
        action="store_true",
        help="check as the operator does: a Run that invokes an Agent or a command must "
        "name spec.workspace (the local runner gives such a Run its workdir); and what "
        "fails on a cluster: a repo url that is a local path, an Agent with no model "
        "when no default model is known",
    )
    validate.add_argument(
        "--default-model",
        metavar="PROVIDER/MODEL",
        help="with --cluster: the chart's defaultModel, which serves Agents that name no model",
    )

    run = commands.add_parser(
        "run",
        help="run a Run on this machine, to its end",
        description=(
            "Run a Run manifest on this machine: clone its repo slots into a workdir, start "
            "a Harness (and the scripted model) on 127.0.0.1, drive the Run to its end with "
            "a live table of its Turns, and print a summary. Exit status: 0 Succeeded, "
            "1 Failed or Cancelled (or an error), 130 after Ctrl-C, which cancels the Run "
            "and settles every Turn first."
        ),
    )
    run.add_argument("file", nargs="?", type=Path, help="the Run manifest (optional with --resume)")
    run.add_argument(
        "--workdir",
        type=Path,
        help=f"where the clones, worktrees and state go (default: {DEFAULT_ROOT}/<run name>); "
        "a new run needs it empty or absent",
    )
    run.add_argument(
        "--model",
        metavar="scripted:SCRIPT",
        help="run every Agent on the scripted model, answering from SCRIPT (offline); the "
        "default, when no providers are given, is the script beside FILE (x.yaml → "
        "x.script.yaml), as every example has",
    )
    run.add_argument(
        "--providers",
        type=Path,
        help="the model providers file (YAML: name → {type: openai or anthropic, baseUrl, "
        "apiKeyEnv, maxTokens, retry, timeouts}); env KUBETURN_PROVIDERS",
    )
    run.add_argument(
        "--resume",
        metavar="NAME",
        help="continue the interrupted run NAME from its snapshot in the workdir",
    )
    run.add_argument(
        "--repo",
        action="append",
        default=[],
        metavar="SLOT=URL|PATH",
        help="clone this repository for a repo slot instead of the manifest's url "
        "(repeatable); a relative path is read from the current directory",
    )
    run.add_argument(
        "--max-live-turns",
        type=live_turns,
        metavar="N",
        help="at most N of the Run's Turns live at once (the next wait, in the order they "
        "started); default: the Workspace template's spec.maxLiveTurns, else no cap",
    )
    run.add_argument(
        "--api-port", type=int, default=0, help="port of the Orchestrator API (0: a free one)"
    )
    run.add_argument(
        "--harness-port", type=int, default=0, help="port of the Harness (0: a free one)"
    )

    send = commands.add_parser(
        "send",
        help="send an outside event (a signal) to a Run",
        description="Send an outside event to a Run. An event the Run does not accept now, "
        "or data that misfits the event's schema, is refused before it is sent, naming what "
        "the Run accepts (kubeturn status shows it): a signal is handled when it arrives, "
        "never kept for a state entered later.",
    )
    send.add_argument("name", help="the Run's name")
    send.add_argument("event", help="the event, e.g. approve")
    send.add_argument(
        "--data",
        default="{}",
        help="the event's payload: a JSON object, checked against the event's schema",
    )
    send.add_argument("--id", help="the signal's id, unique in the Run (default: a new one)")
    _target(send)

    cancel = commands.add_parser("cancel", help="cancel a Run (it sends CANCEL once)")
    cancel.add_argument("name", help="the Run's name")
    _target(cancel)

    turns = commands.add_parser("turns", help="print a Run's settled Turns")
    turns.add_argument("name", help="the Run's name")
    _output(turns)
    _target(turns)

    status = commands.add_parser(
        "status",
        help="print a Run's phase, state, Turn count and what it waits for",
    )
    status.add_argument("name", help="the Run's name")
    _output(status)
    _target(status)

    logs = commands.add_parser(
        "logs",
        help="print what a Run's Agents did: each Turn's conversation",
        description="Print each Turn's conversation as a person reads it: its prompt (the "
        "Briefing folded), the model's words, each tool call and its trimmed result, each "
        "pick and its receipt, nudges, notices, and how the Turn ended. TURN (a Turn's "
        "name, e.g. t2) or AGENT (an Agent slot) narrows it; a Turn's name is tried first. "
        "With --kube it is read through the cluster's API server with your kubeconfig's "
        "credentials: you need get on the Run (the view role, where the chart's console is on).",
    )
    logs.add_argument("name", help="the Run's name")
    logs.add_argument("target", nargs="?", metavar="TURN|AGENT", help="one Turn, or one Agent")
    logs.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="follow live Turns; stop when the Run has ended and every Turn is shown",
    )
    logs.add_argument(
        "--since-turn", type=int, metavar="N", help="leave out the Turns numbered below N"
    )
    logs.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="text (the default) or json: one entry per line, nothing folded",
    )
    _target(logs)

    graph = commands.add_parser(
        "graph",
        help="draw a Run manifest's machine (mermaid, Graphviz dot or SVG)",
        description="Print a Run's state machine as a mermaid stateDiagram-v2 (paste it in "
        "Markdown), a Graphviz dot graph, or SVG (drawn by Graphviz's dot, which must be "
        "installed).",
    )
    graph.add_argument("file", type=Path, help="the Run manifest")
    graph.add_argument(
        "-o",
        "--output",
        choices=GRAPH_OUTPUTS,
        default="mermaid",
        help="mermaid (the default), dot or svg",
    )

    ui = commands.add_parser(
        "ui",
        help="serve the web console of local Runs on 127.0.0.1",
        description="Serve a read-only web console of the local Runs under a directory: "
        "Runs, each Run's machine and Turns, each Turn's live transcript. It listens on "
        "127.0.0.1 only and prints its URL; stop it with Ctrl-C.",
    )
    ui.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_ROOT,
        help=f"the directory holding the Runs' workdirs, or one workdir (default: {DEFAULT_ROOT})",
    )
    ui.add_argument(
        "--port", type=int, default=UI_PORT, help=f"the port (default {UI_PORT}; 0: a free one)"
    )
    return parser


GRAPH_OUTPUTS = ("mermaid", "dot", "svg")
UI_PORT = 8765


def graph(args: argparse.Namespace) -> int:
    from kubeturn.machine import graph as drawing

    try:
        text = args.file.read_text(encoding="utf-8")
    except OSError as error:
        raise CommandError(f"cannot read {args.file}: {error.strerror}") from error
    try:
        loaded = load_run(parse_yaml(text, str(args.file)))
    except DefinitionErrors as errors:
        for line in problems(errors, str(args.file)):
            print(line, file=sys.stderr)
        return EXIT_FAILED
    if args.output == "mermaid":
        sys.stdout.write(drawing.mermaid(loaded.chart))
    elif args.output == "dot":
        sys.stdout.write(drawing.dot(loaded.chart, name=loaded.name))
    else:
        sys.stdout.write(_svg(drawing.dot(loaded.chart, name=loaded.name)))
    return 0


def _svg(dot: str) -> str:
    """``dot`` drawn by Graphviz; a ``CommandError`` saying what to do when it is missing."""
    program = shutil.which("dot")
    if program is None:
        raise CommandError(
            "-o svg needs Graphviz's dot on PATH: install Graphviz (e.g. apt-get install "
            "graphviz), or print -o mermaid or -o dot and draw it elsewhere"
        )
    drawn = subprocess.run(
        [program, "-Tsvg"], input=dot, capture_output=True, text=True, check=False
    )
    if drawn.returncode != 0:
        raise CommandError(f"Graphviz's dot failed: {drawn.stderr.strip()}")
    return drawn.stdout


def ui(args: argparse.Namespace) -> int:
    from kubeturn.local.ui import serve

    asyncio.run(serve(args.workdir, args.port, sys.stdout))
    return 0


def _output(command: argparse.ArgumentParser) -> None:
    """The one ``-o`` of every command that prints objects."""
    command.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default="table",
        help="table (the default), wide (more detail), json or yaml (times as RFC 3339, UTC)",
    )


def _target(command: argparse.ArgumentParser) -> None:
    """Where the Run is: a local workdir, or (``--kube``) a cluster."""
    command.add_argument(
        "--workdir",
        type=Path,
        help=f"the local run's workdir (default: {DEFAULT_ROOT}/<name>)",
    )
    command.add_argument("--kube", action="store_true", help="the Run is on a cluster")
    command.add_argument(
        "-n",
        "--namespace",
        help="with --kube: the Run's namespace (default: the kubeconfig context's)",
    )
    command.add_argument("--kubeconfig", help="with --kube: the kubeconfig (default: KUBECONFIG)")


def validate(
    files: Sequence[Path], *, cluster: bool = False, default_model: str | None = None
) -> int:
    """Every document of every file checked; each problem printed, each valid one said.
    With ``cluster``, what fails on a cluster too (``kubeturn.api.cluster_checks``)."""
    failed = False
    known = cluster_checks.known_from(_documents(files), default_model) if cluster else None
    for path in files:
        try:
            documents = parse_yaml_documents(path.read_text(encoding="utf-8"), str(path))
        except OSError as error:
            print(f"{path}: cannot read it: {error.strerror}", file=sys.stderr)
            failed = True
            continue
        except DefinitionErrors as errors:
            for line in problems(errors, str(path)):
                print(line, file=sys.stderr)
            failed = True
            continue
        if not documents:
            print(f"{path}: no manifest in it", file=sys.stderr)
            failed = True
        for number, document in enumerate(documents, start=1):
            source = str(path) if len(documents) == 1 else f"{path} (document {number})"
            kind = document.get("kind") if isinstance(document, dict) else None
            group = str(document.get("apiVersion") or "") if isinstance(document, dict) else ""
            if kind and group and not group.startswith(f"{GROUP}/"):
                # A bundle for kubectl apply holds other objects too (a Secret, a Namespace).
                print(f"{source}: a {kind}, not a kubeturn resource: not checked")
                continue
            try:
                if kind == "Workspace":
                    validate_workspace(document)
                else:
                    load_run(document, workspace_required=cluster)
                if known is not None:
                    cluster_checks.check(document, known)
            except DefinitionErrors as errors:
                for line in problems(errors, source):
                    print(line, file=sys.stderr)
                failed = True
            else:
                print(f"{source}: valid")
    return 1 if failed else 0


def _documents(files: Sequence[Path]) -> list[Any]:
    """The files' documents that can be read (the others' problems are reported in turn)."""
    found = []
    for path in files:
        with contextlib.suppress(OSError, DefinitionErrors):
            found += parse_yaml_documents(path.read_text(encoding="utf-8"), str(path))
    return found


def problems(errors: DefinitionErrors, source: str) -> list[str]:
    """A manifest's problems, one line each, each naming the file and the manifest path."""
    return [
        str(problem) if problem.path.startswith(source) else f"{source}: {problem}"
        for problem in errors.errors
    ]


def run(args: argparse.Namespace) -> int:
    from kubeturn.local.runner import LocalRun, Options
    from kubeturn.tracing import Tracing

    overrides: dict[str, str] = {}
    for item in args.repo:
        slot, sep, url = item.partition("=")
        if not sep or not slot or not url:
            raise CommandError(
                f"--repo {redacted(item)!r} is not SLOT=URL|PATH, e.g. --repo target=."
            )
        if carries_credentials(url):
            raise CommandError(
                f"--repo {slot}: the URL must not carry credentials, which the clone's "
                ".git/config would keep for the Agents to read; let git's credential helper "
                "or ssh key give them"
            )
        overrides[slot] = url
    options = Options(
        manifest=args.file,
        workdir=args.workdir,
        model=args.model,
        providers=args.providers,
        resume=args.resume,
        repos=overrides,
        api_port=args.api_port,
        harness_port=args.harness_port,
        max_live_turns=args.max_live_turns,
    )
    tracing = Tracing.of(os.environ)
    runner = LocalRun(options, sys.stdout, tty=sys.stdout.isatty(), tracing=tracing)
    try:
        return asyncio.run(runner.run())
    except DefinitionErrors as errors:
        source = str(args.file) if args.file is not None else f"the run {args.resume}"
        for line in problems(errors, source):
            print(line, file=sys.stderr)
        return EXIT_FAILED
    finally:
        if tracing is not None:
            tracing.shutdown()


def send(args: argparse.Namespace) -> int:
    try:
        data = json.loads(args.data)
    except ValueError as error:
        raise CommandError(
            f'--data is not JSON ({error}); give an object, e.g. \'{{"notes": "ok"}}\''
        ) from error
    if not isinstance(data, dict):
        raise CommandError('--data must be a JSON object, e.g. \'{"notes": "ok"}\'')
    signal_id = args.id or f"{args.event[:48]}-{secrets.token_hex(4)}"
    if args.kube:

        async def checked_send(cluster: Any) -> None:
            _accepts(args.name, await cluster.status(), args.event, data)
            await cluster.send(args.event, data, signal_id)

        asyncio.run(_on_cluster(args, checked_send))
        print(f"sent {args.event} to Run {args.name} (signal {signal_id})")
        return 0
    _accepts(args.name, local.status(args.name, args.workdir), args.event, data)
    sent = local.send(args.name, args.event, data, signal_id, args.workdir)
    if sent.delivered_now:
        print(f"sent {args.event} to run {args.name} (signal {signal_id})")
    else:
        print(
            f"queued {args.event} for run {args.name} (signal {signal_id}); no kubeturn run "
            f"drives it now: `kubeturn run --resume {args.name}` delivers it"
        )
    return 0


def _accepts(name: str, status: dict[str, Any], event: str, data: dict[str, Any]) -> None:
    """Refuse, before it is sent, a signal the Run would ignore (ADR 0067). A Run that has
    not started, or whose status predates ``acceptedEvents``, is judged when it arrives;
    an ended one is refused by the send itself."""
    if status.get("phase") in FINISHED or "acceptedEvents" not in status:
        return
    found = list(status.get("acceptedEvents") or [])
    if len(found) >= signals.MAX_ACCEPTED and all(item.get("event") != event for item in found):
        return  # the status lists only the first ones: the Run judges the rest
    why = signals.refusal(found, event, data)
    if why is not None:
        raise CommandError(f"not sent to run {name}: {why}")


def cancel(args: argparse.Namespace) -> int:
    if args.kube:
        asyncio.run(_on_cluster(args, lambda cluster: cluster.cancel()))
        print(f"cancel requested for Run {args.name}")
        return 0
    if local.cancel(args.name, args.workdir):
        print(f"cancel requested for run {args.name}")
    else:
        print(
            f"cancel requested for run {args.name}; no kubeturn run drives it now: "
            f"`kubeturn run --resume {args.name}` cancels it"
        )
    return 0


def turns(args: argparse.Namespace) -> int:
    status = _status(args)
    records = list(status.get("turns") or [])
    if _printed(records, args.output):
        return 0
    if records:
        print("\n".join(view.history_table(records, wide=args.output == "wide")))
        dropped = int(status.get("droppedTurns") or 0)
        if dropped:
            print(view.dropped_line(dropped))
    else:
        print(f"run {args.name} has no settled Turns yet")
    return 0


def status(args: argparse.Namespace) -> int:
    found = {k: v for k, v in _status(args).items() if k != "snapshot"}
    if not args.kube:
        found["driven"] = local.driven(args.name, args.workdir)
    if not _printed(found, args.output):
        print("\n".join(view.status_lines(args.name, found, wide=args.output == "wide")))
    return 0


def logs(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_logs(args))
    except BrokenPipeError:
        # Whatever read the output stopped (``| head``): stop quietly, as a Unix tool
        # does, and let nothing try to flush into the closed pipe at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


async def _logs(args: argparse.Namespace) -> int:
    """Print the transcript of a local Run, or (``--kube``) of one on a cluster."""
    if args.kube:
        from kubeturn.k8s.transcript_client import RemoteTranscripts

        remote = RemoteTranscripts(args.name, args.namespace, args.kubeconfig)
        try:
            query = await remote.query(args.target, since_turn=args.since_turn, follow=args.follow)
            return await print_transcript(remote, query, args.output)
        finally:
            remote.close()
    from kubeturn.local.transcripts import LocalTranscripts

    source = LocalTranscripts(args.name, args.workdir)
    query = source.query(args.target, since_turn=args.since_turn, follow=args.follow)
    return await print_transcript(source, query, args.output)


async def print_transcript(source: TranscriptSource, query: Query, output: str) -> int:
    """Print what ``source`` yields for ``query``: as text, Turn after Turn with a blank
    line between, or (``json``) one entry per line; each line is flushed as it comes, so a
    follower sees it at once."""
    first = True
    async for entry in source.entries(query):
        if output == "json":
            print(entry.model_dump_json(), flush=True)
            continue
        if entry.kind is EntryKind.TURN and not first:
            print()
        first = False
        print("\n".join(text.lines(entry)), flush=True)
    if first and output == "text":
        print("no Turns yet")
    return 0


def shown_version(args: argparse.Namespace) -> int:
    if not _printed({"version": version()}, args.output):
        print(f"kubeturn {version()}")
    return 0


def _printed(value: Any, output: str) -> bool:
    """``value`` printed as ``-o json`` or ``-o yaml`` say (its times as RFC 3339); False
    for ``table`` and ``wide``, which each command prints its own way."""
    if output == "json":
        print(json.dumps(view.rfc3339(value), indent=2, ensure_ascii=False))
    elif output == "yaml":
        print(yaml.safe_dump(view.rfc3339(value), sort_keys=False, allow_unicode=True), end="")
    else:
        return False
    return True


def _status(args: argparse.Namespace) -> dict[str, Any]:
    if args.kube:
        return dict(asyncio.run(_on_cluster(args, lambda cluster: cluster.status())))
    return local.status(args.name, args.workdir)


async def _on_cluster(args: argparse.Namespace, act: Any) -> Any:
    from kubeturn.k8s.control import Cluster

    cluster = Cluster(args.name, args.namespace, args.kubeconfig)
    try:
        return await act(cluster)
    finally:
        cluster.close()


def operator_settings(args: argparse.Namespace) -> OperatorSettings:
    """The operator's settings from its flags (and their environment twins, which the
    chart's Deployment sets); a CommandError saying which one is refused and why."""
    providers = OperatorSettings().providers_yaml
    if args.providers is not None:
        try:
            providers = args.providers.read_text(encoding="utf-8")
        except OSError as error:
            raise CommandError(
                f"cannot read the providers file {args.providers}: {error.strerror}"
            ) from error
        if (problem := models.providers_problem(providers)) is not None:
            raise CommandError(f"--providers (the chart's providers) is refused: {problem}")
    sandbox_egress = _chart_json(
        args.sandbox_egress, SandboxEgress, "sandbox.egress", "--sandbox-egress"
    )
    sandbox_resources = _chart_json(
        args.sandbox_resources, SandboxResources, "sandbox.resources", "--sandbox-resources"
    )
    retention = OperatorSettings().turn_retention_s
    if args.turn_retention is not None:
        try:
            retention = parse_duration(args.turn_retention)
        except ValueError as error:
            raise CommandError(
                f"--turn-retention (the chart's turnRetention) is refused: {error}"
            ) from error
    sandbox_tracing = _chart_json(
        args.sandbox_tracing, SandboxTracing, "tracing", "--sandbox-tracing"
    )
    if (args.console_certificate is None) != (args.console_key is None):
        raise CommandError(
            "--console-certificate and --console-key go together: the console serves "
            "with both or is not served"
        )
    if args.default_model is not None:
        why = models.unknown_provider(args.default_model, models.provider_names(providers))
        if why is not None:
            raise CommandError(f"--default-model (the chart's defaultModel) is refused: {why}")
    return OperatorSettings(
        namespaces=tuple(args.namespaces),
        harness_image=args.harness_image,
        orchestrator_url=args.orchestrator_url,
        providers_yaml=providers,
        default_model=args.default_model,
        api_port=args.api_port,
        console_port=args.console_port,
        console_certificate=args.console_certificate,
        console_key=args.console_key,
        operator_labels=tuple(_labels(args.operator_labels)),
        operator_namespace=args.operator_namespace,
        sandbox_egress=sandbox_egress,
        sandbox_resources=sandbox_resources,
        sandbox_tracing=sandbox_tracing,
        require_confinement=args.require_confinement,
        turn_retention_s=retention,
        namespace_max_live_turns=args.namespace_max_live_turns,
    )


def live_turns(text: str) -> int:
    """A cap on live Turns: a whole number, 1 or more."""
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of Turns (1 or more)")
    return number


def operator(args: argparse.Namespace) -> int:
    from kubeturn.k8s import leader
    from kubeturn.k8s import operator as running
    from kubeturn.k8s.console_source import cluster_console
    from kubeturn.tracing import Tracing

    try:
        settings = operator_settings(args)
    except CommandError as error:
        print(f"kubeturn: {error}", file=sys.stderr)
        return 2
    election = None
    if args.lease is not None:
        if not args.operator_namespace:
            print(
                "kubeturn: --lease needs the operator's namespace, where the Lease is: "
                "pass --operator-namespace (or set KUBETURN_OPERATOR_NAMESPACE)",
                file=sys.stderr,
            )
            return 2
        timings = {
            "lease_duration_s": args.lease_duration,
            "renew_deadline_s": args.renew_deadline,
            "retry_period_s": args.retry_period,
        }
        try:
            election = leader.Election(
                namespace=args.operator_namespace,
                name=args.lease,
                # The pod's name (the chart sets POD_NAME); a pod's hostname is its name too.
                identity=leader.identity(os.environ.get("POD_NAME") or socket.gethostname()),
                **{key: value for key, value in timings.items() if value is not None},
            )
        except ValueError as error:
            print(f"kubeturn: {error}", file=sys.stderr)
            return 2
    # What was made so far (modules, models, settings) lives as long as the process: the
    # cyclic garbage collector, which a Run's load sets off, need not scan it each time,
    # holding the GIL from the event loop (ADR 0050).
    gc.collect()
    gc.freeze()
    try:
        asyncio.run(
            running.run(
                settings,
                kubeconfig=args.kubeconfig,
                election=election,
                tracing=Tracing.of(os.environ),
                console=cluster_console,
            )
        )
    except LeadershipLost:
        return EXIT_FAILED  # logged by the operator; the pod restarts as a standby
    return 0


Chart = TypeVar("Chart", bound=BaseModel)


def _chart_json(text: str, model: type[Chart], value: str, flag: str) -> Chart:
    """``model`` from the JSON the chart renders from its ``value``; a CommandError
    naming every problem by its path under that value."""
    try:
        return model.model_validate_json(text)
    except ValidationError as error:
        problems = [
            f"{value}.{problem.path}: {problem.message}"
            if problem.path
            else f"{value}: {problem.message}"
            for problem in definition_errors(error, model)
        ]
        raise CommandError(f"{flag} is refused: {'; '.join(problems)}") from error


def _labels(text: str) -> list[tuple[str, str]]:
    pairs = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"kubeturn: operator label {item!r} is not key=value")
        pairs.append((key, value))
    return pairs


class JsonFormatter(logging.Formatter):
    """One JSON object per record, for log pipelines."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


COMMANDS = {
    "run": run,
    "send": send,
    "cancel": cancel,
    "turns": turns,
    "status": status,
    "logs": logs,
    "version": shown_version,
    "graph": graph,
    "ui": ui,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "validate":
        return validate(args.files, cluster=args.cluster, default_model=args.default_model)
    if args.command in COMMANDS:
        return _person(args)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.log_format == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonFormatter())
    return operator(args)


def _person(args: argparse.Namespace) -> int:
    """A command a person runs at a terminal: failures are one line, never a traceback."""
    if not getattr(args, "kube", False) and (
        getattr(args, "namespace", None) or getattr(args, "kubeconfig", None)
    ):
        print("kubeturn: --namespace and --kubeconfig go with --kube", file=sys.stderr)
        return EXIT_FAILED
    try:
        return int(COMMANDS[args.command](args))
    except CommandError as error:
        print(f"kubeturn: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as error:
        if logging.getLogger().handlers:  # the run's log file; never a traceback on stderr
            log.exception("kubeturn %s failed", args.command)
        print(
            f"kubeturn: {args.command} failed unexpectedly: {type(error).__name__}: {error} "
            "(a bug: please report it, with the workdir's .kubeturn/logs/kubeturn.log)",
            file=sys.stderr,
        )
        return EXIT_FAILED
