"""Fixtures of the docker tier: a Docker engine and a Debian base image, found or made.

Every test in this directory is marked ``docker``. Tests that need an engine ask for
``docker_engine`` (and ``debian_base``); a test that needs none (the Dockerfile lint)
asks for neither, and so runs wherever its own tool is installed.

``docker_engine`` (session): a docker CLI that can build with BuildKit, talking to an
engine. It uses the engine ``docker info`` reaches; else, as root with ``dockerd``
installed, it starts a private dockerd (no bridge, no iptables, state in a temporary
directory) and stops it, by its PID, when the session ends; else it skips, naming what
is missing. ``.ci/docker-engine.sh`` installs what a Debian machine lacks.

``debian_base`` (session): makes sure ``debian:bookworm-slim`` exists in that engine. No
registry is reachable here, so when it is missing it is made with ``debootstrap
--variant=minbase bookworm`` and ``docker import``; the root filesystem's tarball is
cached under ``~/.cache/kubeturn/`` so later sessions only import it (delete the tarball
to refresh it). Where a registry is reachable, ``KUBETURN_DOCKER_PULL=1`` pulls the real
image instead; without it the tier never pulls.

Network rule: tests send traffic to 127.0.0.1 only. Containers run with
``--network=host`` and bind 127.0.0.1; builds use ``--network=host``; the private dockerd
has no bridge, so no container ever gets a private-range address.

``docker_engine``, ``harness_image`` and ``operator_image`` (the tier): the engine, and the
Harness image and the operator image (the Dockerfile's two targets) built at once
under tags of their own, in a thread started as soon as the suite is collected (the tiers
before this one hide the two minutes), untagged and stopped when the tier ends: the tests
of an image and of what runs in it share one build.

The time each phase took is gathered in ``docker_timings`` and printed at the end of the
session.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docker.images import built

DEBIAN_BASE = "debian:bookworm-slim"
"""The tag the Dockerfiles build FROM; made locally when no registry can be reached."""

PULL_OPT_IN = "KUBETURN_DOCKER_PULL"
"""Set to 1 to let the tier pull the base image from a registry (a laptop, GitHub
Actions). Off by default: tests reach no address but 127.0.0.1 unless asked to."""

DOCKERD_START_SECONDS = 20.0
"""How long a private dockerd may take to answer; it is up in about a second here."""

DOCKERD_STOP_SECONDS = 15.0
"""SIGTERM grace for the private dockerd before SIGKILL; it stops in ~1 s once no
container runs, and 15 s is the most it waits for its containers to stop."""

DEBOOTSTRAP_SECONDS = 900.0
"""debootstrap takes ~30-40 s with a near mirror; 15 min covers a slow one."""

_HERE = Path(__file__).resolve().parent
_TIMINGS = pytest.StashKey[dict[str, float]]()
_PREPARED = pytest.StashKey["Prepared"]()


@dataclass(frozen=True)
class DockerEngine:
    """A docker CLI that can build with BuildKit, and the environment that points it at
    a working engine. Call it with the CLI's arguments."""

    cli: str
    """Path of the docker CLI: one with the buildx plugin, or one older than 23.0, whose
    ``docker build`` has BuildKit built in (Debian's docker.io)."""
    env: Mapping[str, str]
    """The process environment plus ``DOCKER_HOST`` (for a private dockerd) and
    ``DOCKER_BUILDKIT=1``."""

    def __call__(
        self, *args: str, timeout: float = 120.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run ``docker ARGS`` and capture its output; raise on failure when ``check``."""
        result = subprocess.run(
            [self.cli, *args],
            env=dict(self.env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"docker {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
            )
        return result


# --------------------------------------------------------------------------- hooks


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of this directory ``docker`` before ``-m`` selects."""
    for item in items:
        if _HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.docker)


def pytest_collection_finish(session: pytest.Session) -> None:
    start_preparing(session)


def pytest_sessionfinish(session: pytest.Session) -> None:
    stop_preparing(session)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print how long each phase of the docker tier took, when any ran."""
    timings = terminalreporter.config.stash.get(_TIMINGS, {})
    if timings:
        figures = ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in timings.items())
        terminalreporter.write_line(f"docker tier timings: {figures}")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def docker_timings(request: pytest.FixtureRequest) -> dict[str, float]:
    """Phase name -> seconds, printed at the end of the session."""
    return request.config.stash.setdefault(_TIMINGS, {})


@pytest.fixture(scope="package")
def prepared(request: pytest.FixtureRequest) -> Iterator[Prepared]:
    """The tier's engine and images: made since the suite was collected, or from now on
    when the tier runs alone. Package-scoped: stopped when the tier's last test ends, not
    in the teardown of whatever test ends the session, whose timeout would then take in
    stopping the engine and removing its images."""
    config = request.config
    made = config.stash.get(_PREPARED, None) or Prepared(config.stash.setdefault(_TIMINGS, {}))
    config.stash[_PREPARED] = made
    yield made
    made.close()


@pytest.fixture(scope="package")
def docker_engine(prepared: Prepared) -> DockerEngine:
    """A usable Docker engine: the one ``docker info`` reaches, or a private dockerd."""
    return prepared.result().engine


@pytest.fixture(scope="package")
def harness_image(prepared: Prepared) -> str:
    """The Harness image's tag."""
    return prepared.result().images["harness"]


@pytest.fixture(scope="package")
def operator_image(prepared: Prepared) -> str:
    """The operator image's tag."""
    return prepared.result().images["operator"]


@dataclass(frozen=True)
class Made:
    engine: DockerEngine
    images: dict[str, str]


class Prepared:
    """The engine, the Debian base image and both images, made in a thread of their own:
    about two minutes spent mostly waiting on debootstrap, apt and PyPI, which the tiers
    collected before this one then hide. Whatever it raised (a skip saying why there is
    no engine, a failed build) is raised again to every test that asks."""

    def __init__(self, timings: dict[str, float]) -> None:
        self._stack = contextlib.ExitStack()
        self._outcome: Made | BaseException | None = None
        self._thread = threading.Thread(
            target=self._make, args=(timings,), name="docker-tier", daemon=True
        )
        self._thread.start()

    def _make(self, timings: dict[str, float]) -> None:
        try:
            engine = self._stack.enter_context(_engine(timings))
            base = _debian_base(engine, timings)
            images = self._stack.enter_context(_images(engine, base, timings))
            self._outcome = Made(engine, images)
        except BaseException as error:  # a skip is a BaseException: it must reach the tests
            self._outcome = error

    def result(self) -> Made:
        self._thread.join()
        outcome = self._outcome
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is not None
        return outcome

    def close(self) -> None:
        self._thread.join()
        self._stack.close()


def start_preparing(session: pytest.Session) -> None:
    """Start the tier's engine and images when any collected test needs them."""
    needs = {"docker_engine", "harness_image", "operator_image"}
    if any(needs & set(getattr(item, "fixturenames", ())) for item in session.items):
        config = session.config
        config.stash[_PREPARED] = Prepared(config.stash.setdefault(_TIMINGS, {}))


def stop_preparing(session: pytest.Session) -> None:
    """Stop what a session that never reached the tier (``-x``) had started."""
    made = session.config.stash.get(_PREPARED, None)
    if made is not None:
        made.close()


@contextlib.contextmanager
def _engine(timings: dict[str, float]) -> Iterator[DockerEngine]:
    cli, reasons = _find_buildkit_cli()
    if cli is None:
        pytest.skip(
            "no docker CLI that can build with BuildKit: "
            + ("; ".join(reasons) or "no docker on PATH")
            + " (bash .ci/docker-engine.sh installs Debian's docker.io)"
        )
    base_env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    if _engine_answers(cli, base_env):
        yield DockerEngine(cli=cli, env=base_env)
        return
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        missing = "dockerd is not installed" if dockerd is None else "not running as root"
        pytest.skip(
            f"no Docker engine: `docker info` fails and none can be started ({missing}); "
            "bash .ci/docker-engine.sh installs one on Debian"
        )
    started = time.monotonic()
    with _private_dockerd(dockerd, cli, base_env) as env:
        timings["dockerd start"] = time.monotonic() - started
        yield DockerEngine(cli=cli, env=env)


def _debian_base(engine: DockerEngine, timings: dict[str, float]) -> str:
    """The tag of a Debian bookworm base image present in the engine: there already,
    pulled (only when ``KUBETURN_DOCKER_PULL=1``), or imported from a debootstrapped
    root filesystem."""
    if engine("image", "inspect", DEBIAN_BASE, check=False).returncode == 0:
        return DEBIAN_BASE
    if os.environ.get(PULL_OPT_IN) == "1":
        started = time.monotonic()
        if engine("pull", DEBIAN_BASE, check=False, timeout=300).returncode == 0:
            timings["base pull"] = time.monotonic() - started
            return DEBIAN_BASE
    tarball = _cache_dir() / "debian-bookworm-minbase-rootfs.tar"
    if not tarball.exists():
        debootstrap = shutil.which("debootstrap")
        if debootstrap is None or os.geteuid() != 0:
            missing = "debootstrap is not installed" if debootstrap is None else "not root"
            pytest.skip(
                f"no {DEBIAN_BASE} image and none can be made ({missing}): "
                "bash .ci/docker-engine.sh installs debootstrap, or, where a registry is "
                f"reachable, set {PULL_OPT_IN}=1 to pull it"
            )
        started = time.monotonic()
        _debootstrap_tarball(debootstrap, tarball)
        timings["debootstrap"] = time.monotonic() - started
    started = time.monotonic()
    engine("import", "--change", 'CMD ["bash"]', str(tarball), DEBIAN_BASE, timeout=300)
    timings["base import"] = time.monotonic() - started
    return DEBIAN_BASE


@contextlib.contextmanager
def _images(engine: DockerEngine, base: str, timings: dict[str, float]) -> Iterator[dict[str, str]]:
    """The Harness and operator images, built at once (each build spends most of its
    time waiting on apt and PyPI), under tags of their own; untagged afterwards."""
    builds = {
        "harness": built(
            engine, base, "harness", "kubeturn-harness", timings, "harness image build"
        ),
        "operator": built(
            engine, base, "operator", "kubeturn-operator", timings, "operator image build"
        ),
    }
    with ThreadPoolExecutor(len(builds)) as pool:
        started = {name: pool.submit(build.__enter__) for name, build in builds.items()}
    with contextlib.ExitStack() as stack:
        for name, future in started.items():
            if future.exception() is None:
                stack.push(builds[name].__exit__)
        # The first failed build raises here; the stack untags what the other made.
        yield {name: future.result() for name, future in started.items()}


# --------------------------------------------------------------------------- engine


def _find_buildkit_cli() -> tuple[str | None, list[str]]:
    """The first docker CLI on PATH (then Debian's /usr/bin/docker) that can build with
    BuildKit, and why each one before it cannot.

    A CLI of 23.0 or later builds with BuildKit only through the buildx plugin, and
    fails without it; an older one (Debian bookworm's 20.10) has BuildKit built in."""
    candidates: list[str] = []
    for directory in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/bin"]:
        path = Path(directory or ".") / "docker"
        if path.is_file() and os.access(path, os.X_OK):
            real = str(path.resolve())
            if real not in candidates:
                candidates.append(real)
    reasons: list[str] = []
    for cli in candidates:
        if _quiet([cli, "buildx", "version"]).returncode == 0:
            return cli, reasons
        # `docker version` prints the client's version, then fails without an engine.
        version = _quiet([cli, "version", "--format", "{{.Client.Version}}"]).stdout.strip()
        major = re.match(r"(\d+)\.", version)
        if major is not None and int(major.group(1)) < 23:
            return cli, reasons
        reasons.append(f"{cli} ({version or 'unknown version'}) has no buildx plugin")
    return None, reasons


def _engine_answers(cli: str, env: Mapping[str, str]) -> bool:
    """Whether ``docker info`` reaches an engine within 20 s (a hung socket counts as no)."""
    try:
        return _quiet([cli, "info"], env=env, timeout=20.0).returncode == 0
    except subprocess.TimeoutExpired:
        return False


@contextlib.contextmanager
def _private_dockerd(
    dockerd: str, cli: str, base_env: Mapping[str, str]
) -> Iterator[dict[str, str]]:
    """Run a dockerd whose whole state lives in a fresh temporary directory; yield the
    environment that points the CLI at it; stop it by its PID and remove the state.

    No bridge and no iptables rules: containers get only ``--network=host`` or none, so
    no traffic goes to a private range. The directory sits directly under /tmp because
    the sockets inside it must fit a unix socket path (107 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="kt-dockerd-", dir="/tmp"))
    socket = root / "docker.sock"
    env = {**base_env, "DOCKER_HOST": f"unix://{socket}"}
    command = [
        dockerd,
        "--bridge=none",
        "--iptables=false",
        "--ip6tables=false",
        f"--data-root={root / 'data'}",
        f"--exec-root={root / 'exec'}",
        f"--host=unix://{socket}",
        "--pidfile",
        str(root / "docker.pid"),
    ]
    log_path = root / "dockerd.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + DOCKERD_START_SECONDS
        while not _engine_answers(cli, env):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-2000:]
                pytest.skip(
                    f"dockerd could not be started (exit {process.poll()}) within "
                    f"{DOCKERD_START_SECONDS:.0f} s; its log ends:\n{tail}"
                )
            time.sleep(0.25)
        yield env
    finally:
        _stop(process)
        _unmount_under(root)
        # Its images are a GiB of small files: removed by a process the shell leaves
        # behind, which the suite does not wait for (20 s of the tier's last teardown).
        subprocess.run(
            ["sh", "-c", 'rm -rf --one-file-system "$1" >/dev/null 2>&1 &', "rm", str(root)],
            check=False,
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM dockerd, wait, then SIGKILL its process group (dockerd and the containerd
    it started, both ours: the group was made for it)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=DOCKERD_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=DOCKERD_STOP_SECONDS)


def _unmount_under(root: Path) -> None:
    """Unmount what a stopped dockerd left mounted under ``root`` (it leaves the nsfs of
    ``exec/netns/default``; a killed one may leave overlays), deepest first, so the
    directory can be removed."""
    prefix = f"{root}/"
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    points = [fields[1] for fields in map(str.split, mounts) if fields[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False, timeout=30)


def _quiet(
    command: list[str], env: Mapping[str, str] | None = None, timeout: float = 20.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# --------------------------------------------------------------------------- base image


def _cache_dir() -> Path:
    """``$XDG_CACHE_HOME/kubeturn`` (``~/.cache/kubeturn``), made if missing."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = base / "kubeturn"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _debootstrap_tarball(debootstrap: str, tarball: Path) -> None:
    """Make a minimal bookworm root filesystem and write it to ``tarball`` atomically.

    The package cache and apt lists are dropped (~80 MB): every Dockerfile runs
    ``apt-get update`` itself. /dev is left empty, as in registry images; the engine
    fills it."""
    with tempfile.TemporaryDirectory(prefix="kt-debootstrap-") as work:
        rootfs = Path(work) / "rootfs"
        result = subprocess.run(
            [debootstrap, "--variant=minbase", "bookworm", str(rootfs)],
            capture_output=True,
            text=True,
            timeout=DEBOOTSTRAP_SECONDS,
            check=False,
        )
        if result.returncode != 0:
            log_path = rootfs / "debootstrap" / "debootstrap.log"
            log = log_path.read_text(errors="replace") if log_path.exists() else ""
            raise AssertionError(
                f"debootstrap failed ({result.returncode}):\n{result.stderr[-2000:]}\n{log[-2000:]}"
            )
        for leftover in ["var/cache/apt/archives", "var/lib/apt/lists"]:
            for path in (rootfs / leftover).glob("*"):
                if path.is_file():
                    path.unlink()
        for path in (rootfs / "var/cache/apt").glob("*.bin"):
            path.unlink()
        partial = tarball.with_name(tarball.name + ".partial")
        tar = ["tar", "--numeric-owner", "--exclude=./dev/*", "-C", str(rootfs)]
        subprocess.run(
            [*tar, "-cf", str(partial), "."],
            check=True,
            timeout=300,
        )
        partial.replace(tarball)
