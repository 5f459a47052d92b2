"""The kvdice Python package on the tiny fixtures: one LLM per test module (loading is cheap)."""
import os
from pathlib import Path

import pytest

import kvdice

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
QWEN3 = str(FIXTURES / "qwen3")
BINARY = os.environ.get("KVDICE_BINARY", str(ROOT / "build" / "kvdice"))


@pytest.fixture(scope="module")
def llm():
    return kvdice.LLM(QWEN3, backend="cpu", threads=1)
