"""Fixtures more than one CPU test module shares."""

from __future__ import annotations

import pytest

from tests.support.sanitized import Sanitized, build_sanitized


@pytest.fixture(scope="session")
def sanitized(tmp_path_factory: pytest.TempPathFactory) -> Sanitized:
    """libfoundry and the fake driver under AddressSanitizer + UBSan, built once for the session."""
    return build_sanitized(tmp_path_factory.mktemp("sanitized"))
