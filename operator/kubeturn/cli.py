"""The ``kubeturn`` command. The only place that reads the operator's environment.

``kubeturn operator`` runs the operator; ``kubeturn validate FILE...`` checks manifests
with the same checks the operator runs, and prints every problem with its path.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from kubeturn.errors import DefinitionErrors
from kubeturn.machine.load import load_run_yaml


def _parser() -> argparse.ArgumentParser:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="kubeturn", description="Run coding-agent workflows.")
    commands = parser.add_subparsers(dest="command", required=True)

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
        "--harness-image", default=env("KUBETURN_HARNESS_IMAGE", "ghcr.io/kubeturn/harness:latest")
    )
    operator.add_argument(
        "--orchestrator-url",
        default=env("KUBETURN_ORCHESTRATOR_URL", "http://kubeturn-orchestrator:8081"),
    )
    operator.add_argument(
        "--providers", type=Path, default=Path(p) if (p := env("KUBETURN_PROVIDERS")) else None
    )
    operator.add_argument("--api-port", type=int, default=int(env("KUBETURN_API_PORT", "8081")))
    operator.add_argument(
        "--peering", default=env("KUBETURN_PEERING"), help="kopf peering name; none runs standalone"
    )
    operator.add_argument(
        "--operator-labels",
        default=env(
            "KUBETURN_OPERATOR_LABELS",
            "app.kubernetes.io/name=kubeturn,app.kubernetes.io/component=operator",
        ),
        help="k=v,k=v: the operator pods' labels, which sandbox NetworkPolicies admit",
    )
    operator.add_argument("--operator-namespace", default=env("KUBETURN_OPERATOR_NAMESPACE"))
    operator.add_argument(
        "--log-format", choices=["text", "json"], default=env("KUBETURN_LOG_FORMAT", "text")
    )
    operator.add_argument("--kubeconfig", default=env("KUBECONFIG"))
    operator.add_argument("--log-level", default=env("KUBETURN_LOG_LEVEL", "INFO"))

    validate = commands.add_parser("validate", help="check Run manifests; exit 1 on any problem")
    validate.add_argument("files", nargs="+", type=Path)
    return parser


def validate(files: Sequence[Path]) -> int:
    failed = False
    for path in files:
        try:
            load_run_yaml(path.read_text(encoding="utf-8"), str(path))
        except OSError as error:
            print(f"{path}: cannot read it: {error.strerror}", file=sys.stderr)
            failed = True
        except DefinitionErrors as errors:
            for problem in errors.errors:
                print(f"{path}: {problem}", file=sys.stderr)
            failed = True
        else:
            print(f"{path}: valid")
    return 1 if failed else 0


def operator(args: argparse.Namespace) -> int:
    from kubeturn.k8s import operator as running
    from kubeturn.k8s.hub import OperatorSettings

    providers = "{}\n"
    if args.providers is not None:
        try:
            providers = args.providers.read_text(encoding="utf-8")
        except OSError as error:
            print(
                f"kubeturn: cannot read the providers file {args.providers}: {error.strerror}",
                file=sys.stderr,
            )
            return 2
    settings = OperatorSettings(
        namespaces=tuple(args.namespaces),
        harness_image=args.harness_image,
        orchestrator_url=args.orchestrator_url,
        providers_yaml=providers,
        api_port=args.api_port,
        operator_labels=tuple(_labels(args.operator_labels)),
        operator_namespace=args.operator_namespace,
    )
    asyncio.run(running.run(settings, kubeconfig=args.kubeconfig, peering=args.peering))
    return 0


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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "validate":
        return validate(args.files)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.log_format == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonFormatter())
    return operator(args)
