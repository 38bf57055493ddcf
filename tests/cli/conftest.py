"""Fixtures of the cli tier; the parts they are made of live in ``support``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli.support import Background, ScriptedModel, git_repo


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A directory holding a git repository, where the user runs ``kubeturn``."""
    return git_repo(tmp_path / "project")


@pytest.fixture
def background() -> Iterator[Callable[..., Background]]:
    """Start ``kubeturn ARGS`` in the background (``cwd=`` required); killed at the end
    if a test left it running."""
    started: list[Background] = []

    def start(*args: str | Path, cwd: Path) -> Background:
        running = Background.start(*args, cwd=cwd)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


@pytest.fixture
def scripted_model(tmp_path: Path) -> Iterator[Callable[[str], ScriptedModel]]:
    """Start a scripted model of the test's own from script text."""
    started: list[ScriptedModel] = []

    def start(script: str) -> ScriptedModel:
        path = tmp_path / f"script-{len(started)}.yaml"
        path.write_text(script)
        model = ScriptedModel(path, tmp_path)
        started.append(model)
        return model

    yield start
    for model in started:
        model.stop()
