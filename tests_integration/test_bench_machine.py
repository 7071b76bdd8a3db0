"""The benchmark names the library versions its figures were measured with."""

from __future__ import annotations

import importlib.metadata

import pytest

from bench import machine


def test_the_libraries_installed_are_named_with_their_versions_and_a_missing_one_as_absent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(machine, "LIBRARIES", ("aiohttp", "no-such-library-here"))
    assert machine.libraries() == {
        "aiohttp": importlib.metadata.version("aiohttp"),
        "no-such-library-here": "absent",
    }
